"""The help screen (`?`): every key (from the one table, `tui.ui.keys`, with the user's keymap), and
what each panel shows."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from tui.ui import keys

#: What each panel and view shows; the key table above it is built from `tui.ui.keys`.
PANELS = """\
## The screen

- **VRAM**: per device, the *plan* for the settings on screen as stacked segments
  (█ weights, ▓ KV, ▒ draft KV, ░ recurrent state, ▚ compute, ▪ output) on top of memory others
  already use, the `--fit-target` margin as `┃`, and the risk: **OK**, **TIGHT** (inside the
  margin) or **OOM**. The *used* bar is live memory; processes that are not ours are flagged ⚠.
  "SIMULATED" means the device comes from a hardware profile, not from NVML.
  Each device says where its figures come from: the instant *estimate* on every keystroke, then
  *exact (llama.cpp)* once llama.cpp's own dry run of the settings returns (or one sentence on
  why exact is unavailable).
- **Settings**: every llama-server knob, grouped. A bad value is explained under its field; the
  plan follows every valid change.
- **Server**: state, the explained failure, the log tail, and predicted vs reported memory.
- **Probes**: TG t/s, PP t/s and acceptance per request, one series per configuration;
  medians with their min–max spread.

## Runs view (`h`)

`Space` marks a run (two at most), `c` compares the two marked runs (medians, spread, a verdict that
only calls a difference above the measured noise, and the end-to-end time for 12k tokens in and 800
out), `e` exports the marked runs (`E` cycles Markdown, CSV, JSON), `R` reloads, `Escape` goes back.

## Sweep (`w`)

Axes on the left (values comma-separated; `1`-`8` or `e` edit them, `Escape` leaves a field): MTP
on/off, draft n-max, draft KV, main KV, ubatch, ctx, fit-target, `-np`; suite, repeats, objective
(`tg`, `pp` or `workload:IN,OUT`). Every row is planned as you type (memory and risk); rows predicted
to OOM are skipped unless "run predicted OOMs anyway" is ticked. `g` runs or resumes (finished rows
are kept; `r` brings back the newest saved sweep, its settings and axes, to continue it), `x` cancels,
`b` saves the best row as a TOML profile and a `--models-preset` INI section
(the "save as" name). While it runs: progress and ETA, the running row's TG per request, the table
with medians and spread, TG against PP with the best starred. `Escape` goes back; the sweep goes on
and its progress shows on the main screen's bottom line.

## MTP on vs off (`a`)

The settings on screen with and without `draft-mtp`, passes interleaved (off, on, off, on) so drift
hits both. The verdict for your workload: PP, TG, acceptance and seconds per request, the break-even
output length, and INCONCLUSIVE when the difference is inside the noise. Edit input and output
tokens (`i`): the verdict is recomputed at once from the same passes. `g` runs again, `x` cancels.

## Searches (`c`, `F`)

Each launch is a row (value, outcome, why); `x` cancels, `Enter` puts the answer in the form,
`Escape` closes (cancelling a search that still runs).

## Profiles (`f`)

Tabs: save a TOML profile (the API key is never written), write or replace a section of a
`--models-preset` INI file (other sections and comments kept, a `.bak` left behind), load a saved
profile, import a pasted `llama-server` command line. `Escape` closes.

Press `Escape` or `q` to close this screen.
"""


def help_text(keymap: Mapping[str, str]) -> str:
    """The whole help page: the key table for `keymap` (id -> keys), then the panels."""
    return f"# mtp-tune keys\n\n{keys.help_table(keymap)}\n\n{PANELS}"


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 96; max-width: 100%; height: 90%; border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help_screen.close")]

    def __init__(self, keymap: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.text = help_text(keymap or {})

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(self.text)
