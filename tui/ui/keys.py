"""The main screen's and the App's keys as data (Harlequin's one registry of actions).

One row per action: its id (what a user's `[keymap]` in config.toml names), the action it runs, its
default key, the key bar's word and its place there (rank, the state it needs), the help screen's line
and section, and the command palette's entry. The `MainScreen.BINDINGS`, the `MtpTuneApp.BINDINGS`, the
main screen's key bar, the help screen's tables and the palette's commands are all built from `ACTIONS`,
so a key is written down once and a user's keymap shows everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from textual.binding import Binding

#: The id prefix of an action's second key, the one that also works while typing in a field.
TYPING = "typing."


#: The help screen's sections, in its order (every action names one).
SECTIONS: tuple[str, ...] = ("Server", "Probes", "Lab", "Models", "Screen")

#: What the main screen's key bar knows of the state (tui/ui/cockpit/key_bar.py `state_tags` says which
#: hold): "stopped" (no server alive), "managed" (a server mtp-tune started is alive), "alive" (a server,
#: started or attached, is alive), "idle" (no probe run), "probing" (a probe run is in flight).
STATE_TAGS = frozenset({"stopped", "managed", "alive", "idle", "probing"})


@dataclass(frozen=True)
class KeyAction:
    """One action reachable from the keyboard. `scope` "main": a `MainScreen` key (inert on every
    other screen); "app": an App key (every screen).

    The main screen's key bar shows an action with a `rank` while every tag of its `when` holds,
    lower ranks first, as many whole entries as the width takes; the `pinned` ones always, at its end
    (pinned ones with the same label are alternatives: the first whose key works now shows)."""

    id: str
    action: str
    key: str
    label: str
    help: str
    typing_key: str = ""  # F-keys: a priority binding with id `typing.<id>`, fired even in a field
    scope: str = "main"
    palette: tuple[str, str] | None = None  # (title, help) in the command palette
    key_display: str | None = None
    footer: bool = False  # Textual's footers on the other screens show it (only App keys reach them)
    section: str = field(kw_only=True)  # the help screen's heading (one of SECTIONS)
    rank: int = field(default=0, kw_only=True)  # the key bar's order (lower first); 0: not ranked
    when: frozenset[str] = field(default=frozenset(), kw_only=True)  # STATE_TAGS that must all hold
    pinned: bool = field(default=False, kw_only=True)  # always in the bar, at its end


def _when(*tags: str) -> frozenset[str]:
    return frozenset(tags)


ACTIONS: tuple[KeyAction, ...] = (
    # Server
    KeyAction("launch", "launch", "l", "Launch", "launch llama-server with the settings on screen", "f5",
              palette=("Launch server", "start llama-server with the settings on screen"),
              section="Server", rank=1, when=_when("stopped")),
    KeyAction("restart", "restart", "r", "Restart",
              "restart it with the settings on screen (fields marked ↻ need this)", "f6",
              palette=("Restart server", "restart llama-server with the settings on screen"),
              section="Server", rank=2, when=_when("managed")),
    KeyAction("stop", "stop_server", "s", "Stop", "stop it (SIGTERM, grace period, SIGKILL)", "f7",
              palette=("Stop server", "stop llama-server"), section="Server", rank=3, when=_when("managed")),
    KeyAction("log", "raw_log", "o", "Log", "the whole server log of this launch",
              palette=("Server log", "the whole server log"), section="Server", rank=21),
    # Probes
    KeyAction("probe", "run_probes", "p", "Probe", "run the chosen probe suite", "f8",
              palette=("Run probes", "run the chosen probe suite"), section="Probes", rank=4,
              when=_when("alive", "idle")),
    KeyAction("cancel", "cancel_probes", "x", "Cancel", "cancel the probe run", "f9",
              palette=("Cancel probes", "cancel the probe run"), section="Probes", rank=4, when=_when("probing")),
    # Lab: sweep, A/B, searches, tune
    KeyAction("sweep", "sweep", "w", "Sweep",
              "sweep: axes over the knobs that matter, planned, run, best saved (keeps running behind)",
              palette=("Sweep", "axes over the knobs that matter, planned, measured, best saved"),
              section="Lab", rank=11),
    KeyAction("ab", "mtp_ab", "a", "MTP on/off", "MTP on vs off: interleaved passes, the verdict for your workload",
              palette=("MTP on vs off", "interleaved passes, the verdict for your workload"), section="Lab", rank=12),
    KeyAction("tune", "tune", "T", "Tune",
              "tune for me: search the best configuration for a workload (MTP on and off, ubatch, KV types…), "
              "planned before each launch, raced within the noise, the A/B at the end",
              palette=("Tune for me", "an MTP-aware search for the best configuration for a workload"),
              section="Lab", rank=13),
    KeyAction("search_ctx", "search_ctx", "c", "Max ctx",
              "search the largest context that fits (plan, then a launch); Enter puts it in the form",
              palette=("Largest context", "the largest --ctx-size that fits (plan, then a launch)"),
              section="Lab", rank=14),
    KeyAction("search_fit", "search_fit", "F", "Min fit-target",
              "search the smallest `--fit-target` that survives the first decode; Enter puts it in the form",
              palette=("Smallest fit-target", "the smallest --fit-target that survives the first decode"),
              section="Lab", rank=15),
    # Models: variants, memory, profiles, runs
    KeyAction("variants", "variants", "v", "Variants",
              "variants: every quant of the hf-repo planned side by side from the headers (no download); "
              "Enter puts the chosen file in the form",
              palette=("Variants", "every quant of the hf-repo planned side by side, before any download"),
              section="Models", rank=16),
    KeyAction("memory", "memory", "m", "Memory",
              "memory after a launch: estimate, exact (llama.cpp), reported (and NVML on a GPU) side by side",
              palette=("Memory after launch", "estimate, exact, reported (and NVML) side by side"),
              section="Models", rank=17),
    KeyAction("runs", "runs", "h", "Runs", "runs: history, compare two, export",
              palette=("Runs", "history, compare, export"), section="Models", rank=18),
    KeyAction("profiles", "profiles", "f", "Profiles",
              "profiles: save TOML, write a `--models-preset` INI section, load, import a command line",
              palette=("Profiles", "save TOML, write INI section, load, import command line"),
              section="Models", rank=19),
    KeyAction("quality", "quality", "d", "Quality",
              "quality: measure what the main K/V types on screen cost against f16 (KL divergence by "
              "llama-perplexity) in the background; `d` again or `Escape` cancels",
              palette=("Measure quality", "what the K/V types on screen cost: KLD against f16, by llama-perplexity"),
              section="Models", rank=20),
    KeyAction("quality_cancel", "cancel_quality", "escape", "Cancel quality", "cancel the quality measurement",
              section="Models"),
    KeyAction("quality_memory", "quality_memory", "D", "Quality vs memory",
              "quality vs memory: each K/V type's KV memory at this context (planned) against its measured KLD",
              palette=("Quality vs memory", "each K/V type's KV memory at this context against its measured KLD"),
              section="Models", rank=23),
    # Screen
    KeyAction("edit", "edit", "e", "Edit",
              "edit settings (`↑`/`↓` move between fields, `j`/`k` too outside a text field; `Escape` leaves)",
              section="Screen", rank=10),
    KeyAction("find_field", "find_field", "slash", "Find field",
              "go to a settings field by name or flag: type to filter, `Enter` goes there", "ctrl+f",
              key_display="/", section="Screen",
              palette=("Go to field", "jump to a settings field by its name or llama-server flag")),
    KeyAction("theme", "app.next_theme", "t", "Theme", 'next theme (all themes: command palette → "theme")',
              palette=("Next theme", "cycle mtp-tune's themes"), section="Screen", rank=22),
    KeyAction("help", "help", "question_mark", "Help", "this help", "f1", key_display="?",
              section="Screen", pinned=True),
    KeyAction("quit", "back_or_quit", "q", "Quit",
              "back from a screen; on the main screen quit, stopping the server mtp-tune started "
              "(asks first while a run is in flight)", scope="app", footer=True, section="Screen", pinned=True),
    KeyAction("quit_now", "quit", "ctrl+q", "Quit", "quit from any screen (asks first while a run is in flight)",
              "ctrl+q", scope="app", section="Screen", pinned=True),  # the bar's Quit while typing in a field
    KeyAction("palette", "command_palette", "ctrl+p", "palette",
              "command palette: every action by name (the keys the bar has no room for)", "ctrl+p",
              scope="app", section="Screen", pinned=True),
)


#: The ids of every binding built from this table: an action's, and its typing key's.
BINDING_IDS = frozenset([a.id for a in ACTIONS] + [TYPING + a.id for a in ACTIONS if a.typing_key != a.key and a.typing_key])


def by_id() -> dict[str, KeyAction]:
    return {a.id: a for a in ACTIONS}


def bindings(scope: str) -> list[Binding]:
    """The `BINDINGS` of one scope ("main" or "app"), every one with its id."""
    out: list[Binding] = []
    for a in ACTIONS:
        if a.scope != scope:
            continue
        single = a.typing_key == a.key  # ctrl+p: one key that works everywhere
        out.append(Binding(a.key, a.action, a.label, show=a.footer, key_display=a.key_display, id=a.id,
                           priority=single))
    for a in ACTIONS:  # the same actions while typing in a field (letters go to the field there)
        if a.scope == scope and a.typing_key and a.typing_key != a.key:
            out.append(Binding(a.typing_key, a.action, a.label, show=False, priority=True, id=TYPING + a.id))
    return out


def ids() -> frozenset[str]:
    """Every id a `[keymap]` may name in this table (an action and its typing key)."""
    return BINDING_IDS


def key_label(key: str) -> str:
    """`question_mark` -> `?`, `ctrl+q` -> `Ctrl+Q`, `f5` -> `F5`: how the help screen writes a key."""
    named = {"question_mark": "?", "slash": "/", "space": "Space", "escape": "Escape", "enter": "Enter", "tab": "Tab"}
    parts = key.split("+")
    mods = [m.capitalize() for m in parts[:-1]]
    last = parts[-1]
    if last in named:
        last = named[last]
    elif len(last) > 1:
        last = last.upper() if last[0] == "f" and last[1:].isdigit() else last.capitalize()
    elif mods:
        last = last.upper()
    return "+".join([*mods, last])


def keys_text(keymap: Mapping[str, str], binding_id: str, default: str) -> str:
    """A binding's keys with the user's `[keymap]` applied, as the help screen writes them (`` `P` `F12` ``)."""
    keys = keymap.get(binding_id, default)
    return " ".join(f"`{key_label(k.strip())}`" for k in keys.split(",") if k.strip())


def help_rows(keymap: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(id, keys, keys while typing, what it does) per action, with the user's keymap applied."""
    rows = []
    for a in ACTIONS:
        typing_id = a.id if a.typing_key == a.key else TYPING + a.id
        typing = keys_text(keymap, typing_id, a.typing_key) if a.typing_key else ""
        rows.append((a.id, keys_text(keymap, a.id, a.key), typing, a.help))
    return rows


def help_table(keymap: Mapping[str, str]) -> str:
    """The help screen's key tables (Markdown), one per section of `SECTIONS`."""
    rows = {row[0]: row for row in help_rows(keymap)}
    out = []
    for section in SECTIONS:
        out += [f"## {section}", "", "| key | while typing | action | `[keymap]` id |", "|---|---|---|---|"]
        out += [f"| {keys} | {typing} | {text} | {_id} |"
                for _id, keys, typing, text in (rows[a.id] for a in ACTIONS if a.section == section)]
        out.append("")
    return "\n".join(out)


def bar(tags: frozenset[str]) -> tuple[list[KeyAction], list[KeyAction]]:
    """The main screen's key bar for the state `tags` (of STATE_TAGS): the actions that matter, most
    important first (the bar shows as many as fit), and the pinned ones that always end it."""
    ranked = sorted((a for a in ACTIONS if a.rank > 0 and a.when <= tags), key=lambda a: a.rank)
    return ranked, [a for a in ACTIONS if a.pinned]


def palette(scope: str) -> list[KeyAction]:
    """The actions of `scope` that the command palette offers."""
    return [a for a in ACTIONS if a.scope == scope and a.palette is not None]

