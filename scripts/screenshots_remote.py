"""The remote screenshots of scripts/screenshots.py: a model that is not on this disk, over loopback.

- `variants-picker`: the variants picker (`v`) on a Hub repo of Qwen3.6-35B-A3B quants as shape-only
  GGUFs (tests/helpers/quant_repo.py: the real tensor tables, so the real sizes and memory figures),
  on simulated 2 x V100 16 GB, the form at the 2 x V100 guide's flags, comparing KV types (`k`).
- `download-progress`: a real launch with `-hf` (the demo's CPU llama-server) while it downloads the
  25 MB `small-mtp-q8_0` model, the link slowed so that the download takes about ten seconds.

Both repos are served from 127.0.0.1 with the Hub's routes (tests/helpers/range_server.py), exactly
as scripts/variants_table.py serves them, and `HF_ENDPOINT` points there: the real Hub is never
reached. Headers, listings, dry runs and llama-server's `LLAMA_CACHE` go to the temporary directory.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from variants_table import MMPROJ, MMPROJ_BYTES, _sparse

#: the 2 x V100 guide's form (scripts/variants_table.py's ARGS): 100k context, one slot, MTP, q8_0 draft KV
V100_FORM = dict(ctx_size=100000, parallel=1, spec_type=["draft-mtp"], cache_type_k_draft="q8_0",
                 cache_type_v_draft="q8_0")
#: the other screenshots' size: the picker's table (device columns by key, labels on two lines, the
#: file named only where the tag does not say it) fits in 120 columns at these flags
PICKER_SIZE = (120, 40)
DOWNLOAD_REPO, DOWNLOAD_TAG = "demo/small-mtp-GGUF", "Q8_0"
DOWNLOAD_FILE = f"small-demo-{DOWNLOAD_TAG}.gguf"  # no "mtp-" in it: llama.cpp would take it for a draft sidecar
DOWNLOAD_SECONDS = 10.0
_PERCENT = re.compile(r"(\d+)%")

Until = Callable[..., Any]  # scripts/screenshots.py's until(pilot, predicate, what, timeout)
Save = Callable[[Any, str], None]  # and its save(app, name)


@contextmanager
def loopback_hub(work: Path) -> Iterator[Any]:
    """The loopback Hub with `HF_ENDPOINT` on it and every remote cache under `work` (restored after)."""
    from tests.helpers.range_server import serve

    work.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_HOME", "LLAMA_CACHE", "MTP_TUNE_REMOTE_DIR",
                                            "MTP_TUNE_EXACT_DIR", "MODEL_ENDPOINT", "HF_TOKEN")}
    os.environ.pop("MODEL_ENDPOINT", None)  # it would win over HF_ENDPOINT (llama.cpp's rule)
    os.environ.pop("HF_TOKEN", None)
    os.environ["HF_HOME"] = str(work / "hf-home")  # no stored token
    os.environ["LLAMA_CACHE"] = str(work / "llama-cache")  # llama-server's -hf downloads (inherited env)
    os.environ["MTP_TUNE_REMOTE_DIR"] = str(work / "remote")  # not the user's header cache
    os.environ["MTP_TUNE_EXACT_DIR"] = str(work / "exact")  # nor the exact-mode cache
    try:
        with serve() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            yield hub
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _text(app: Any, selector: str) -> str:
    return str(app.query_one(selector).render())


def _planned(app: Any) -> bool:
    return app.main.plan.view is not None and app.main.plan.view.seq == app.main.plan.seq


def read_header_first(settings: Any) -> None:
    """Read (and cache) the form's model header before the App starts, as its first plan would: the
    App's two planners (the estimate's worker and the exact plan's) would otherwise both fetch it at
    once, and the header cache's `store` (tui/core/remote/cache.py) can lose that race: one pid-named
    temporary folder for both threads ("no such file", FileNotFoundError or AssertionError on screen)."""
    from tui.ui.cockpit.remote import to_local

    to_local(settings)


async def settle_remote_plan(pilot: Any, app: Any, until: Until, what: str, exact: bool = False) -> None:
    """Wait (bounded) for the form's plan of the remote model (and with `exact`, llama.cpp's dry run)."""
    await until(pilot, lambda: _planned(app) and not (exact and app.main.plan.view.exact == "pending"), what, 300)
    view = app.main.plan.view
    if view.error or (exact and view.exact == "unavailable"):
        raise SystemExit(f"screenshots: {what}: {view.error or view.exact_note}")


async def variants_run(work: Path, until: Until, save: Save, size: tuple[int, int]) -> None:
    """screenshots/variants-picker.svg: every quant of the repo planned from its header, 3 KV types each."""
    from tests.helpers.quant_repo import QUANTS, REPO, fixed_host, write_quants
    from tui.core.demo.prepare import prepare_demo
    from tui.core.gpu.profiles import PROFILES
    from tui.core.options.settings import Settings
    from tui.ui.app import make_app
    from tui.ui.options import AppOptions
    from tui.ui.variants.screen import VariantsScreen

    setup = prepare_demo(progress=lambda ev: print(f"[{ev.phase}] {ev.message}", file=sys.stderr))
    files = write_quants(work / "quants")
    files[MMPROJ] = _sparse(work / "quants" / MMPROJ, MMPROJ_BYTES)  # listed with its size, never read
    hardware = PROFILES["2xv100-16g"]
    options = AppOptions(
        settings=Settings(hf_repo=REPO, **V100_FORM), server_bin=setup.server, hardware=hardware, simulate=True,
        demo=True, cursor_blink=False, title=f"mtp-tune demo · {hardware.key} (simulated)",
    )
    with loopback_hub(work) as hub, fixed_host():
        hub.add_repo(REPO, files)
        read_header_first(options.settings)
        app = make_app(options)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.main.plan.snapshot is not None, "the first telemetry sample")
            await settle_remote_plan(pilot, app, until, "the form's plan (the default quant's header)")
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, VariantsScreen) and app.screen.controller.view.done,
                        "the variants table", 300)
            screen = app.screen
            await pilot.press("k")  # compare f16, q8_0 and q4_0 (the headers are cached: nothing is fetched)
            rows = len(QUANTS) * 3
            await until(pilot, lambda: screen.controller.view.done and len(screen.controller.view.rows) == rows
                        and screen.query_one("#variants-table").row_count == rows, "the KV comparison", 300)
            if screen.controller.view.error:
                raise SystemExit(f"screenshots: the variants picker failed: {screen.controller.view.error}")
            table = screen.query_one("#variants-table")
            if table.virtual_size.width > table.size.width:
                raise SystemExit(f"screenshots: the variants table is {table.virtual_size.width} cells wide, "
                                 f"{table.size.width} shown: widen PICKER_SIZE")
            await pilot.pause(0.5)
            save(app, "variants-picker")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, VariantsScreen), "the picker to close", 30)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, "the app to quit", 30)


def _percent(app: Any) -> int | None:
    """The download line's percentage, or None while there is none."""
    line = _text(app, "#server-download")
    m = _PERCENT.search(line) if "downloading" in line else None
    return int(m.group(1)) if m else None


async def download_run(work: Path, until: Until, save: Save, size: tuple[int, int]) -> None:
    """screenshots/download-progress.svg: a real `-hf` launch while llama-server downloads the model."""
    from tui.core.demo.prepare import prepare_demo
    from tui.core.demo.tiny_model import PRESETS, write_tiny_model
    from tui.core.options.settings import Settings
    from tui.ui.app import make_app
    from tui.ui.options import AppOptions

    setup = prepare_demo(progress=lambda ev: print(f"[{ev.phase}] {ev.message}", file=sys.stderr))
    (work / "served").mkdir(parents=True, exist_ok=True)
    model = write_tiny_model(work / "served" / DOWNLOAD_FILE, PRESETS["small-mtp-q8_0"])
    settings = Settings(hf_repo=f"{DOWNLOAD_REPO}:{DOWNLOAD_TAG}", ctx_size=4096, parallel=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3, threads=1, threads_batch=1)
    options = AppOptions(
        settings=settings, server_bin=setup.server, hardware=setup.hardware, simulate=True, demo=True,
        cursor_blink=False, title=f"mtp-tune demo · {setup.hardware.key} (simulated)",
    )
    with loopback_hub(work) as hub:
        hub.add_repo(DOWNLOAD_REPO, {DOWNLOAD_FILE: model})
        read_header_first(settings)
        app = make_app(options)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.main.plan.snapshot is not None, "the first telemetry sample")
            await settle_remote_plan(pilot, app, until, "the plan (estimate, then llama.cpp's dry run)", exact=True)
            await pilot.pause(0.3)
            hub.rate_bps = model.stat().st_size / DOWNLOAD_SECONDS  # the link's speed: about ten seconds
            await pilot.press("l")
            try:
                await until(pilot, lambda: (_percent(app) or 0) >= 40 or app.main.server.status.state == "failed",
                            "the download to be under way", 120)
                pct = _percent(app)
                if pct is None or not 20 <= pct <= 80:
                    raise SystemExit(f"screenshots: the download line is {_text(app, '#server-download')!r} "
                                     f"(server {app.main.server.status.state}: {app.main.server.status.failure})")
                save(app, "download-progress")  # the line just read: 40 % or a step past it
            finally:
                hub.rate_bps = None
                await pilot.press("s")  # stop it (SIGTERM, then SIGKILL): no orphan
                await until(pilot, lambda: not app.main.server.status.alive, "the server to stop", 60)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, "the app to quit", 30)

