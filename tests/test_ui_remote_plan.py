"""A model not on this disk, planned in the TUI before any download, against the loopback Hub: typing
an -hf repo into the hf-repo field (or a -mu URL in the extra arguments) gives the estimate once the
header is read on a worker, with the same figures as planning the file on disk; later keystrokes
plan at once without asking the network; llama.cpp's exact figures follow, labelled exact; and a
repo, tag or host that does not answer is a one-sentence plan error, not a traceback."""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input

from tests.helpers.range_server import LoopbackHub, closed_port_url
from tests.helpers.shapemodel import write_shape_model
from tui.core.gpu.profiles import PROFILES, HwProfile
from tui.core.options.settings import Settings
from tui.core.planning.devices import current_snapshot, device_set
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.ui.cockpit.planning import plan_is_quick
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import EXACT_LABEL, PlanView

DEADLINE_S = 60.0
LAPTOP = PROFILES["rtx3060-laptop-6g"]
FLAGS = Settings(ctx_size=8192, parallel=1, spec_type=["draft-mtp"], spec_draft_n_max=3)


def options(settings: Settings, hardware: HwProfile = LAPTOP, **kw: object) -> AppOptions:
    return AppOptions(settings=settings, hardware=hardware, simulate=True, cursor_blink=False,  # type: ignore[arg-type]
                      sample_interval_s=60.0, **{"exact": False, **kw})


@pytest.fixture(scope="module")
def shape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Qwen3.6-35B-A3B shape: ~20 GB apparent, a ~5 MB header."""
    return write_shape_model(tmp_path_factory.mktemp("shape") / "Qwen3.6-35B-A3B-Q4_K_M.gguf")


async def until(pilot, cond: Callable[[], bool]) -> bool:  # noqa: ANN001 - Pilot
    deadline = time.monotonic() + DEADLINE_S
    while not cond() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()
    if not cond():  # say where every thread is: a plan that never comes is otherwise a bare `assert False`
        for tid, frame in sys._current_frames().items():
            print(f"--- thread {tid}\n" + "".join(traceback.format_stack(frame)[-12:]))
    return cond()


def current(app: MtpTuneApp) -> PlanView | None:
    """The plan on screen when it is for the newest settings."""
    view = app.main.plan.view
    return view if view is not None and view.seq == app.main.plan.seq else None


def local_figures(path: Path, settings: Settings, hardware: HwProfile = LAPTOP) -> dict[str, tuple[float, ...]]:
    """The core planner on the file on disk: (weights, KV, compute, needed) per device."""
    ds = device_set(current_snapshot(hardware), ())
    s = dataclasses.replace(settings, model=str(path), hf_repo=None, extra_args=[])
    p = plan(read_gguf(path), s, list(ds.devices), ds.host_total_mib, ds.host_free_mib)
    return {d.key: (d.components["weights"], d.components["kv"], d.components["compute"], d.needed_mib)
            for d in p.devices}


def shown_figures(view: PlanView) -> dict[str, tuple[float, ...]]:
    devices = [*view.devices, *([view.host] if view.host is not None else [])]
    return {d.key: (d.weights_mib, d.kv_mib, d.compute_mib, d.needed_mib) for d in devices}


def only_ranged_reads(hub: LoopbackHub, prefix: str) -> bool:
    reads = hub.hits(prefix)
    return bool(reads) and all(h.method == "GET" and h.range.startswith("bytes=") and h.status == 206 for h in reads)


async def type_into(pilot, app: MtpTuneApp, field: str, text: str) -> None:  # noqa: ANN001 - Pilot
    box = app.query_one(f"#f-{field}", Input)
    box.focus()
    await pilot.press("end", *["backspace"] * len(box.value), *text)


async def test_typing_a_repo_plans_the_header_then_every_key_is_instant(hub: LoopbackHub, shape: Path) -> None:
    hub.add_repo("unsloth/Qwen3.6-35B-A3B-GGUF", {"Qwen3.6-35B-A3B-Q4_K_M.gguf": shape})
    app = make_app(options(FLAGS))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        spec = "unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M"
        await type_into(pilot, app, "hf_repo", spec)
        assert await until(pilot, lambda: (p := current(app)) is not None and app.main.plan.settings.hf_repo == spec)
        view = current(app)
        assert view is not None and view.error is None, view
        assert app.main.plan.problems == () or all(p.severity != "error" for p in app.main.plan.problems)
        assert shown_figures(view) == local_figures(shape, app.main.plan.settings)
        # the header alone: a few MB of range reads of a ~20 GB file, nothing downloaded
        assert only_ranged_reads(hub, "/blobs/")
        assert hub.bytes_sent() < shape.stat().st_size / 1000
        # no other model's header was read on the way (partial names are planned only once they settle)
        assert {h.path.split("/resolve/")[0] for h in hub.hits("/resolve/")} == {"/unsloth/Qwen3.6-35B-A3B-GGUF"}
        # later keystrokes plan at once on the key path, and ask the network nothing
        asked = len(hub.log)
        field = app.query_one("#f-ctx_size", Input)
        field.focus()
        await pilot.press("end", *["backspace"] * len(field.value))
        for digit in "32768":
            await pilot.press(digit)
            assert plan_is_quick(app.main.plan.settings)
            assert current(app) is not None  # planned by the key's own handler, no worker round trip
        assert app.main.plan.settings.ctx_size == 32768
        bigger = current(app)
        assert bigger is not None and bigger.devices[0].kv_mib > view.devices[0].kv_mib
        assert shown_figures(bigger) == local_figures(shape, app.main.plan.settings)
        assert len(hub.log) == asked


async def test_a_model_url_in_the_extra_arguments_plans_from_its_header(hub: LoopbackHub,
                                                                        tiny_models: dict[str, Path]) -> None:
    """`mtp-tune -mu URL` puts `-mu URL` in the extra arguments (the form has no URL field): it is the
    model, so the form asks for none, and the plan is the file's."""
    url = hub.add_file("tiny-mtp.gguf", tiny_models["tiny-mtp"])
    app = make_app(options(dataclasses.replace(FLAGS, extra_args=["-mu", url])))
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: current(app) is not None)
        view = current(app)
        assert view is not None and view.error is None, view
        assert not [p for p in app.main.plan.problems if p.severity == "error"], app.main.plan.problems
        assert not app.query_one("#row-model").has_class("-error")
        assert shown_figures(view) == local_figures(tiny_models["tiny-mtp"], FLAGS)
        assert only_ranged_reads(hub, "/files/")


@pytest.mark.parametrize("case", ["no such repo", "no such quant", "unreachable"])
async def test_a_remote_model_that_cannot_be_read_is_a_one_sentence_plan_error(
        case: str, hub: LoopbackHub, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo("user/repo", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    spec, says = {"no such repo": ("user/nope", "was not found"), "no such quant": ("user/repo:Q2_K", "Q2_K"),
                  "unreachable": ("user/repo", "cannot reach")}[case]
    if case == "unreachable":
        monkeypatch.setenv("HF_ENDPOINT", closed_port_url().split("/files/")[0])
    app = make_app(options(dataclasses.replace(FLAGS, hf_repo=spec)))
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: current(app) is not None)
        view = current(app)
        assert view is not None and view.error, view
        assert says in view.error and "Traceback" not in view.error and "\n" not in view.error
        assert view.error.count(". ") == 0 and view.error.endswith(".")  # one sentence
        assert says in str(app.query_one("#plan-notes").render())


async def test_the_same_settings_said_again_keep_their_plan(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """The form says Changed for each field mounted with a value, and again as the fields below the
    fold mount: the same settings are no change, so the plan on screen stays current and the Hub is
    not asked again (the echo made the plan stale for a remote re-read, failing the waits above)."""
    hub.add_repo("user/repo", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    app = make_app(options(dataclasses.replace(FLAGS, hf_repo="user/repo:Q2_K")))
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: current(app) is not None)
        view, asked = current(app), len(hub.log)
        app.main.form.announce()
        await pilot.pause()
        assert current(app) is view
        assert len(hub.log) == asked


async def test_the_exact_plan_of_a_hub_model_arrives_labelled_exact(server_bin: Path, rpc_server_bin: Path,
                                                                    hub: LoopbackHub, tiny_models: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    from tui.core.planning.exact import exact_plan
    from tui.ui.cockpit.planning import exact_request

    hub.add_repo("user/repo", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"], "m-Q8_0.gguf": tiny_models["tiny-mtp-q8_0"]})
    settings = dataclasses.replace(FLAGS, hf_repo="user/repo:Q4_K_M")
    app = make_app(options(settings, exact=True, server_bin=server_bin, demo=True, exact_debounce_s=0.05,
                           server_log_dir=tmp_path / "logs"))
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact in ("exact", "unavailable"))
        view = current(app)
        assert view is not None and view.error is None and view.exact == "exact", view
        assert view.devices[0].source == EXACT_LABEL and app.main.vram.border_subtitle == f"plan: {EXACT_LABEL}"
        # llama.cpp's figures for the file on disk, dry-run directly, are the same
        local = dataclasses.replace(app.main.plan.settings, model=str(tiny_models["tiny-mtp"]), hf_repo=None)
        args, kwargs = exact_request(local, app.main.plan.snapshot, app.options)
        want = exact_plan(*args, root=tmp_path / "direct", **kwargs).plan.device("CUDA0").components  # type: ignore[union-attr]
        dev = view.devices[0]
        assert (dev.weights_mib, dev.kv_mib, dev.compute_mib) == (want["weights"], want["kv"], want["compute"])
        # the estimate and the dry run read the header only: never the whole file
        assert only_ranged_reads(hub, "/blobs/")
        assert hub.bytes_sent("/blobs/") <= tiny_models["tiny-mtp"].stat().st_size / 2


async def test_the_bars_say_a_header_is_being_read(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """On a slow link the bars say what the plan waits for (a header, read by ranges), then the plan
    replaces the line."""
    from tui.ui.cockpit.vram_bars import VramBars

    hub.add_repo("me/tiny-GGUF", {"tiny-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    hub.rate_bps = 200_000  # the first 256 KiB range takes about a second
    app = make_app(options(FLAGS))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await type_into(pilot, app, "hf_repo", "me/tiny-GGUF")
        bars = app.query_one(VramBars)
        assert await until(pilot, lambda: "reading the header of me/tiny-GGUF" in str(bars.border_subtitle))
        assert current(app) is None
        assert await until(pilot, lambda: current(app) is not None)
        assert "reading the header" not in str(bars.border_subtitle)
