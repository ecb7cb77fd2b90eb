"""The first hour in a real terminal at 100x30 (issue 31): demo -> form -> launch -> probe -> the MTP
on/off run -> back -> quit while that run is in flight, against the real llama-server.

Quitting with a run in flight must ask first and, once confirmed, leave no process behind: every
descendant of the pane's shell seen while the run was under way is gone afterwards. Synchronisation
is bounded polling of `tmux capture-pane` (tests/helpers/tmux.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.tmux import Tmux, alive, children, servers_under, start_demo, tmux, wait_exit  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_first_hour_walk_at_100x30(tmux: Tmux, server_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    marker, pane = start_demo(tmux, server_bin, tmp_path, width=100, height=30)

    tmux.wait_for(lambda s: "VRAM" in s and "STOPPED" in s, "the first frame", 60)
    tmux.keys("e")  # into the form, and out again
    tmux.wait_for(lambda s: "Leave form" in s, "the form's keys in the footer", 20)
    tmux.keys("Escape")  # (a key sent at once after it would read as Alt+key: wait for the footer)
    tmux.wait_for(lambda s: "Leave form" not in s and "Launch" in s, "the main screen's keys again", 20)

    tmux.keys("l")
    tmux.wait_for(lambda s: "READY" in s, "the server to be ready", 120)
    tmux.keys("p")
    tmux.wait_for(lambda s: "ok: " in s and "request" in s, "the probe run to end", 300)

    tmux.keys("a")  # MTP on vs off says how long it takes, and that it stops the user's server
    tmux.wait_for(lambda s: "Run MTP on vs off?" in s and "stopped first" in s and "Expected: about" in s,
                  "the question before the run", 30)
    tmux.keys("y")
    seen: set[int] = set()

    def a_trial_server(_text: str) -> bool:
        seen.update(servers_under(pane))
        return bool(seen)

    tmux.wait_for(a_trial_server, "the MTP on/off run's first server", 120)
    tmux.keys("q")  # back to the cockpit: the run keeps going behind
    tmux.wait_for(lambda s: "VRAM" in s, "the cockpit again", 20)
    assert not marker.exists(), "q on a pushed screen quit the app"
    tmux.keys("q")
    tmux.wait_for(lambda s: "Quit mtp-tune?" in s and "passes so far are lost" in s, "the quit question", 20)
    seen |= children(pane)
    tmux.keys("y")
    assert wait_exit(tmux, marker) == "0"
    left = {p for p in seen if alive(p)}  # seen before the quit: the app and what it started
    assert not left, f"processes outlived mtp-tune: {left}"
