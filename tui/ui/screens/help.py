"""The help screen (`?`): every key, and what each panel shows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# mtp-tune keys

| key | while typing | action |
|---|---|---|
| `l` | `F5` | launch llama-server with the settings on screen |
| `r` | `F6` | restart it with the settings on screen (fields marked ↻ need this) |
| `s` | `F7` | stop it (SIGTERM, grace period, SIGKILL) |
| `p` | `F8` | run the chosen probe suite |
| `x` | `F9` | cancel the probe run |
| `o` | | the whole server log of this launch |
| `m` | | memory after a launch: estimate, exact (llama.cpp), reported (and NVML on a GPU) side by side |
| `h` | | runs: history, compare two, export |
| `w` | | sweep: axes over the knobs that matter, planned, run, best saved (keeps running behind) |
| `a` | | MTP on vs off: interleaved passes, the verdict for your workload |
| `c` | | search the largest context that fits (plan, then a launch); Enter puts it in the form |
| `F` | | search the smallest `--fit-target` that survives the first decode; Enter puts it in the form |
| `f` | | profiles: save TOML, write a `--models-preset` INI section, load, import a command line |
| `e` | | edit settings (`Escape` leaves the form, `Tab` moves between fields) |
| `t` | | next theme (all themes: command palette → "theme") |
| `?` | `F1` | this help |
| `Ctrl+P` | `Ctrl+P` | command palette: every action by name |
| `q` | `Ctrl+Q` | quit, stopping the server mtp-tune started |

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


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 96; max-width: 100%; height: 90%; border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)
