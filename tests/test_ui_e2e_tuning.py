"""End to end in a real terminal: `mtp-tune --demo` in tmux runs a 2x2 sweep from the sweep screen
and the MTP on/off verdict against the real llama-server, the best row and the verdict are read off
the screen, `q` quits, and no llama-server it started is left (checked in /proc).

Synchronisation is bounded polling of `tmux capture-pane` (tests/helpers/tmux.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.helpers.tmux import Tmux, alive, servers_under, start_demo, tmux, wait_exit  # noqa: F401 - tmux is the fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


#: The verdict's headline: MTP wins or loses, the same within the noise (its own label), or inconclusive.
HEADLINE = r"MTP WINS|MTP LOSES|THE SAME WITHIN THE NOISE|INCONCLUSIVE"


def test_sweep_and_verdict_in_a_real_terminal(tmux: Tmux, server_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    marker, pane = start_demo(tmux, server_bin, tmp_path)
    seen: set[int] = set()

    def watching(predicate):  # noqa: ANN001, ANN202 - also collects the servers started meanwhile
        def check(text: str) -> bool:
            seen.update(servers_under(pane))
            return predicate(text)
        return check

    tmux.wait_for(lambda s: "VRAM" in s and "STOPPED" in s, "the first frame", 60)

    # The sweep screen: MTP on,off is there; add ubatch 256,512 (5 edits the fifth axis, ubatch).
    tmux.keys("w")
    tmux.wait_for(lambda s: "Sweep: g runs" in s and "rows planned" in s, "the sweep screen", 60)
    def footer(s: str) -> str:
        return s.rstrip("\n").splitlines()[-1] if s.strip() else ""

    # The footer says where the keys go (positively: a frame being redrawn can show a blank line).
    in_field = lambda s: "esc Back" in footer(s) and "palette" in footer(s) and "Run/resume" not in footer(s)  # noqa: E731
    in_table = lambda s: "g Run/resume" in footer(s)  # noqa: E731
    tmux.keys("5")
    tmux.wait_for(in_field, "the ubatch field to have the focus", 10)
    tmux.keys("-l", "256,512")
    tmux.wait_for(lambda s: re.search(r"ubatch\s+256,512 ", s) is not None, "the ubatch values typed", 10)
    tmux.keys("Escape")  # out of the field (a key sent at once after it would read as Alt+key)
    tmux.wait_for(lambda s: "4 rows planned" in s and in_table(s), "the 2x2 grid planned", 60)
    t0 = time.monotonic()
    tmux.keys("g")
    best_line = r"Best for TG t/s: #(\d) \(mtp=(on|off) ub=(256|512)\) at ([\d.]+) t/s"
    # (until the whole line is readable: the "sweep done" toast covers part of it for a few seconds)
    screen = tmux.wait_for(watching(lambda s: "sweep done" in s and re.search(best_line, s) is not None),
                           "the sweep to end", 300)
    wall = time.monotonic() - t0
    best = re.search(best_line, screen)
    assert best is not None, screen
    number, mtp, ub, tg = best.group(1), best.group(2), best.group(3), float(best.group(4))
    row = next((line for line in screen.splitlines() if re.search(rf"││\s+{number}\s+{mtp}\s+{ub}\s", line)), None)
    assert row is not None, screen
    # The table rounds the raw figure; the best line shows it to one decimal (463.5 may be 463.46 -> "463"),
    # so the table's value is the rounding of anything within half a unit of the line's last digit.
    shown = {f"{tg + d:.0f}" for d in (-0.05, 0.05)} if tg >= 100 else {f"{tg:.1f}"}
    assert "BEST" in row and " ok " in row and any(f" {v} ±" in row for v in shown), row
    print(f"2x2 demo sweep from the TUI: {wall:.1f} s (best #{number}: mtp={mtp} ub={ub}, TG {tg} t/s)")
    assert len(seen) >= 1  # the sweep launched real servers, and they are gone now
    assert not any(alive(p) for p in seen), seen

    # Back on the main screen, the last sweep is named; then MTP on vs off in one key.
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "last sweep" in s and "VRAM" in s, "the main screen with the sweep's line", 30)
    tmux.keys("a")
    tmux.wait_for(lambda s: "Run MTP on vs off?" in s, "the question saying what the run does", 30)
    tmux.keys("y")
    # The table refills after the headline (rows are replaced, not appended): wait for the whole frame.
    screen = tmux.wait_for(watching(lambda s: "4/4 passes" in s and re.search(HEADLINE, s)
                                    is not None and "(so far)" not in s and "1000 in / 500 out (s)" in s),
                           "the verdict with its table", 300)
    headline = re.search(HEADLINE, screen).group(0)  # type: ignore[union-attr]
    assert "1000 in / 500 out (s)" in screen and "TG t/s" in screen and "acceptance" in screen, screen
    assert re.search(r"MTP (wins|loses)|break-even", screen), screen
    print(f"verdict on screen: {headline}")

    tmux.keys("Escape")
    tmux.wait_for(lambda s: "VRAM" in s, "the main screen", 30)
    tmux.keys("q")
    assert wait_exit(tmux, marker) == "0"
    assert len(seen) >= 2 and not any(alive(p) for p in seen), f"llama-server outlived mtp-tune: {seen}"
    assert not servers_under(pane)
