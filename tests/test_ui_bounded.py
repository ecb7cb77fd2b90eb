"""Everything a long session keeps growing is bounded (the soak benchmark, bench/bench_soak.py, watches
the process; these pin each buffer): server log tail and head, probe series, the sampler's errors."""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace

from tui.core.server.events import DEFAULT_TAIL_LINES, HandleCore
from tui.core.server.launch import HEAD_LINES, Launch
from tui.ui.cockpit.probing import MAX_SERIES, _Progress
from tui.ui.cockpit.views import ProbeState
from tui.ui.shared_views import ProbePoint


class _Core(HandleCore):
    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()


def test_the_server_log_tail_keeps_the_newest_lines_only() -> None:
    core = _Core()
    for i in range(3 * DEFAULT_TAIL_LINES):
        core._feed_line(f"line {i}")
    tail = core.tail()
    assert len(tail) == DEFAULT_TAIL_LINES
    assert tail[-1] == f"line {3 * DEFAULT_TAIL_LINES - 1}"


def test_a_launch_keeps_only_the_head_of_its_log() -> None:
    launch = Launch(1, ["llama-server"], "127.0.0.1", 8080, None, 0.0, 0.0)
    for i in range(5 * HEAD_LINES):
        launch.note_line(f"line {i}")
    assert len(launch.head) == HEAD_LINES and launch.n_lines == 5 * HEAD_LINES


def _run(previous: ProbeState, config: str, n: int) -> ProbeState:
    """One probe run of `n` requests through the panel's progress tracker (no server needed)."""
    tracker = _Progress(previous, config, "tasks", lambda _s: None)
    for i in range(n):
        rec = SimpleNamespace(tg_tps=10.0 + i, pp_tps=100.0, acceptance=0.8, ok=True, prompt="p", error=None)
        tracker.state = dataclasses.replace(
            tracker.state, points=(*tracker.state.points, *_points(config, i, rec)))
    return dataclasses.replace(tracker.state, running=False)


def _points(config: str, i: int, rec: SimpleNamespace) -> tuple:
    return (ProbePoint(config, i, rec.tg_tps, rec.pp_tps, rec.acceptance),)


def test_probe_series_do_not_grow_with_the_number_of_runs() -> None:
    """The same configuration run again replaces its points; at most MAX_SERIES configurations are kept."""
    state = ProbeState()
    for _ in range(50):
        state = _run(state, "MTP n3 c8192", 6)
    assert len(state.points) == 6
    for k in range(20):
        state = _run(state, f"MTP n{k} c8192", 6)
    configs = {p.config for p in state.points}
    assert len(configs) == MAX_SERIES
    assert len(state.points) == 6 * MAX_SERIES


def test_probe_runs_share_one_thread_whoever_asks() -> None:
    """Each probe run used to allocate on a fresh thread (a Textual worker each time), leaving about
    80 KB per run in the allocator's per-thread arenas; runs now all happen on the backend's one probe thread."""
    from tui.ui.cockpit.backend import Backend
    from tui.ui.options import AppOptions

    backend = Backend(AppOptions())
    idents: list[int] = []
    try:
        for _ in range(5):
            t = threading.Thread(target=lambda: idents.append(backend._probe_executor().submit(threading.get_ident).result()))
            t.start()
            t.join(10.0)
    finally:
        backend.close()
    assert len(idents) == 5 and len(set(idents)) == 1
    assert idents[0] != threading.get_ident()


async def test_a_probe_run_in_the_app_starts_no_thread_of_its_own(monkeypatch) -> None:  # noqa: ANN001
    """The app awaits the run on the probe thread; a Textual thread worker per run (a new thread each
    time, with its own arena and stack) was the TUI's share of the soak's growth."""
    from tui.ui.app import make_app
    from tui.ui.cockpit.backend import Backend
    from tui.ui.options import AppOptions

    class Quick(Backend):
        def _run_probes(self, suite, settings, previous, progress, cancel, concurrency=1):  # noqa: ANN001, ANN202
            progress(dataclasses.replace(previous, message="one request"))
            return dataclasses.replace(previous, message=f"ok: 1 request(s) on {threading.current_thread().name}"), 7, None

    options = AppOptions(cursor_blink=False)
    app = make_app(options, Quick(options))
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    async with app.run_test(size=(80, 24)) as pilot:
        for run in range(1, 7):  # the first runs start the probe thread and the loop's executor pool
            if run == 3:
                monkeypatch.setattr(threading.Thread, "start", counting_start)
            app.main.probes.start("tasks", app.main.plan.settings)
            for _ in range(200):
                if app.main.probes.runs_finished >= run:
                    break
                await pilot.pause(0.02)
        monkeypatch.undo()
        assert app.main.probes.runs_finished == 6
        assert "mtp-tune-probe" in app.main.probes.state.message
        # a saved run says so in the panel: no toast per run (each one's render state added up)
        assert len(app._notifications) == 0
    assert started == []
