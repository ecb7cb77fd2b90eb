"""The tune shows life inside a trial and speaks the same defaults in the CLI and the TUI (issue 31):
the status clock moves between the tune's events, each request of a measurement is announced, and an
empty KV-floor field means the CLI's default floor."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from tui.cli import tune as cli_tune
from tui.core.tune import DEFAULT_DRAFT_KV_FLOOR, DEFAULT_KV_FLOOR
from tui.core.tune.args import make_floors
from tui.core.tune.machine import Measure
from tui.core.tune.space import Floors
from tui.ui.lab.tune_screen import FIELDS
from tui.ui.lab.tune_views import TuneSetup, TuneView


def test_the_status_clock_moves_between_events() -> None:
    view = TuneView(running=True, elapsed_s=1.0, eta_s=300.0, budget_s=600.0)
    assert "0:01 elapsed" in view.status_text()
    later = view.status_text(since_s=90.0)
    assert "1:31 elapsed" in later and "ETA ~3:30" in later and "budget left 8:29" in later
    assert "0:01 elapsed" in TuneView(running=False, elapsed_s=1.0).status_text(since_s=90.0)  # an ended tune stays


def test_each_request_of_a_measurement_is_announced() -> None:
    seen: list[tuple[int, int, str]] = []
    m = Measure.__new__(Measure)  # only its progress hook is exercised: no launcher, no journal
    m.on_request = lambda i, n, prompt: seen.append((i, n, prompt))
    m._progress(SimpleNamespace(event="request_started", done=2, total=6, prompt="capital"))
    m._progress(SimpleNamespace(event="request_done", done=3, total=6, prompt="capital"))
    assert seen == [(3, 6, "capital")]


def test_cli_and_tui_floors_agree() -> None:
    p = argparse.ArgumentParser()
    cli_tune.add_arguments(p)
    args = p.parse_args([])
    cli = make_floors(args.kv_floor, args.draft_kv_floor, 0, None)  # what the CLI runs without the flags
    tui = make_floors(TuneSetup().kv_floor, TuneSetup().draft_kv_floor, 0, None)  # the TUI's empty fields
    assert (cli.kv, cli.draft_kv) == (tui.kv, tui.draft_kv) == (DEFAULT_KV_FLOOR, DEFAULT_DRAFT_KV_FLOOR)
    assert (Floors().kv, Floors().draft_kv) == (DEFAULT_KV_FLOOR, DEFAULT_DRAFT_KV_FLOOR)
    assert make_floors(args.kv_floor, None, 0, 0.05).kv is None  # a KLD budget: no main floor, measured instead
    hints = {attr: hint for _fid, _label, attr, hint in FIELDS}
    assert hints["kv_floor"] == f"default: {DEFAULT_KV_FLOOR}"
    assert hints["draft_kv_floor"] == f"default: {DEFAULT_DRAFT_KV_FLOOR}"




def test_a_long_run_says_its_size_and_duration_before_it_starts() -> None:
    """The MTP on/off run and the sweep say what they will do, and how long, from this machine's last
    launch and slowest probed speed (a 7-minute A/B used to start on one key)."""
    from tui.core.lab.ab import ab_size
    from tui.core.lab.events import work_size
    from tui.core.probes.suites import get_suite
    from tui.ui.lab.controller import LabController

    suite = get_suite("tasks")
    size = ab_size(suite, passes=3, n_predict=100)
    assert size.launches == 6 and size.requests == 6 * len(suite.prompts)
    assert size.tokens == 6 * sum(p.n_predict or 100 for p in suite.prompts)
    assert size.seconds(None, 10.0) is None and size.seconds(50.0, None) is None
    assert size.seconds(50.0, 10.0) == 60.0 + size.tokens / 50.0
    assert work_size(4, [10, 20], 3) == type(size)(4, 24, 360)

    lab = LabController.__new__(LabController)  # its `expected` reads two measured figures, nothing else
    lab.server = SimpleNamespace(launch_s=None)
    lab.tg_seen = None
    assert "not known yet" in lab.expected(size)
    lab.server.launch_s, lab.tg_seen = 10.0, 50.0
    assert lab.expected(size).startswith("Expected: about ") and "10 s" in lab.expected(size)
