"""The help screen (`?`): every key by section (from the one table, `tui.ui.keys`, with the user's
keymap), what each panel and screen shows, and the Tune, Variants and Memory screens' own keys (from
their `BINDINGS`). It scrolls at once with the usual keys (its scroll box takes the focus)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from tui.ui import keys
from tui.ui.cockpit.reconcile_screen import ReconcileScreen
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.variants.screen import VariantsScreen

#: What each panel and view shows (headings take the user's keys); the key tables above it are built
#: from `tui.ui.keys`, each screen's keys line from its `BINDINGS`.
PANELS = """\
## The screen

- **VRAM**: per device, the *plan* for the settings on screen as stacked segments
  (█ weights, ▓ KV, ▒ draft KV, ░ recurrent state, ▚ compute, ▪ output) on top of memory others
  already use, the `--fit-target` margin as `┃`, and the risk: **OK**, **TIGHT** (inside the
  margin) or **OOM**. The *used* bar is live memory; processes that are not ours are flagged ⚠.
  "SIMULATED" means the device comes from a hardware profile, not from NVML.
  Each device says where its figures come from: the instant *estimate* on every keystroke, then
  *exact (llama.cpp)* once llama.cpp's own dry run of the settings returns (or one sentence on
  why exact is unavailable). The *quality* line says what the main K/V types cost in output quality
  once measured (mean KLD and same top token against f16, by llama-perplexity): {quality} measures
  them in the background, {quality_memory} sets every K/V type's KV memory against its KLD.
- **Settings**: every llama-server knob, grouped. A bad value is explained under its field; the
  plan follows every valid change.
- **Server**: state, the explained failure, the log tail, and predicted vs reported memory.
- **Probes**: TG t/s, PP t/s and acceptance per request, one series per configuration;
  medians with their min–max spread.

## Runs view ({runs})

`Space` marks a run (two at most), `c` compares the two marked runs (medians, spread, a verdict that
only calls a difference above the measured noise, and the end-to-end time for 12k tokens in and 800
out), `e` exports the marked runs (`E` cycles Markdown, CSV, JSON), `R` reloads, `Escape` goes back.

## Sweep ({sweep})

Axes on the left (values comma-separated; `1`-`8` or `e` edit them, `Escape` leaves a field): MTP
on/off, draft n-max, draft KV, main KV, ubatch, ctx, fit-target, `-np`; suite, repeats, objective
(`tg`, `pp` or `workload:IN,OUT`). Every row is planned as you type (memory and risk); rows predicted
to OOM are skipped unless "run predicted OOMs anyway" is ticked. `g` runs or resumes (finished rows
are kept; `r` brings back the newest saved sweep, its settings and axes, to continue it), `x` cancels,
`b` saves the best row as a TOML profile and a `--models-preset` INI section
(the "save as" name). While it runs: progress and ETA, the running row's TG per request, the table
with medians and spread, TG against PP with the best starred. `Escape` goes back; the sweep goes on
and its progress shows on the main screen's bottom line.

## MTP on vs off ({ab})

The settings on screen with and without `draft-mtp`, passes interleaved (off, on, off, on) so drift
hits both. The verdict for your workload: PP, TG, acceptance and seconds per request, the break-even
output length, and INCONCLUSIVE when the difference is inside the noise. Edit input and output
tokens (`i`): the verdict is recomputed at once from the same passes. `g` runs again, `x` cancels.

## Searches ({search_ctx}, {search_fit})

Each launch is a row (value, outcome, why); `x` cancels, `Enter` puts the answer in the form,
`Escape` closes (cancelling a search that still runs).

## Profiles ({profiles})

Tabs: save a TOML profile (the API key is never written), write or replace a section of a
`--models-preset` INI file (other sections and comments kept, a `.bak` left behind), load a saved
profile, import a pasted `llama-server` command line. `Escape` closes.

## Tune ({tune})

"Tune for me": the MTP-aware search of `mtp-tune tune` over the settings on screen. The setup on the
left says what is searched (an axis with values is searched over them; an empty one keeps the form's
value), for which workload, within which budget and KV floors; every other setting is fixed. On the
right: the counts and the best so far with its spread, every trial (what differs from the fixed
flags, the plan, the status, PP, TG, acceptance, seconds per request, why it was pruned), the PP-vs-TG
plot with the Pareto front, and at the end the A/B verdict and the break-even. The tune runs behind:
`Escape` goes back and its progress shows on the main screen's bottom line.

{tune_keys}

## Variants ({variants})

Every quant of the form's hf-repo planned side by side from the file headers, before any download:
one row per file and main KV type with its size, what each device needs and would have left, whether
it fits, the largest `-c` that fits and what `--fit on` would change; the best fitting row first.
Under the table: the highlighted row in words, what `-hf` downloads besides, the legend.

{variants_keys}

## Memory ({memory})

Memory after a launch, per device and component, then each device's total (MiB): the instant
estimate, llama.cpp's exact dry run, what the server reported, and on a real GPU what NVML says our
server's process holds; the differences to the reported figure on the right.

{memory_keys}

Press `Escape` or `q` to close this screen.
"""


def screen_keys(bindings: Sequence[BindingType], keymap: Mapping[str, str]) -> str:
    """One line of a screen's own keys (from its `BINDINGS`, with the user's `[keymap]` applied)."""
    shown = [f"{keys.keys_text(keymap, b.id, b.key)} {b.description}"
             + (" (while typing)" if f".{keys.TYPING}" in b.id else "")
             for b in bindings if isinstance(b, Binding) and b.id]
    return "Keys: " + " · ".join(shown) + "."


def help_text(keymap: Mapping[str, str]) -> str:
    """The whole help page for `keymap` (id -> keys): the key tables by section, then what each
    panel and screen shows, with its keys."""
    shown = {a.id: keys.keys_text(keymap, a.id, a.key) for a in keys.ACTIONS}
    panels = PANELS.format(**shown, tune_keys=screen_keys(TuneScreen.BINDINGS, keymap),
                           variants_keys=screen_keys(VariantsScreen.BINDINGS, keymap),
                           memory_keys=screen_keys(ReconcileScreen.BINDINGS, keymap))
    return f"# mtp-tune keys\n\n{keys.help_table(keymap)}\n# What each screen shows\n\n{panels}"


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 96; max-width: 100%; height: 90%; border: round $primary; background: $surface; padding: 0 1; }
    """
    #: The scroll box's own keys (arrows, PgUp/PgDn, Home/End) work as soon as it has the focus;
    #: these add a pager's.
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help_screen.close"),
        Binding("j", "scroll('down')", "Down", show=False, id="help_screen.down"),
        Binding("k", "scroll('up')", "Up", show=False, id="help_screen.up"),
        Binding("space", "scroll('page_down')", "Page down", show=False, id="help_screen.page_down"),
        Binding("b", "scroll('page_up')", "Page up", show=False, id="help_screen.page_up"),
    ]
    AUTO_FOCUS = "#help-scroll"

    def __init__(self, keymap: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.text = help_text(keymap or {})

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-scroll"):
            yield Markdown(self.text)

    def action_scroll(self, how: str) -> None:
        """Scroll the page one line or one page (`how`: down, up, page_down, page_up)."""
        box = self.query_one("#help-scroll", VerticalScroll)
        {"down": box.scroll_down, "up": box.scroll_up, "page_down": box.scroll_page_down,
         "page_up": box.scroll_page_up}[how]()
