"""The main screen's and the App's keys as data (Harlequin's one registry of actions).

One row per action: its id (what a user's `[keymap]` in config.toml names), the action it runs, its
default key, the footer's word, the help screen's line and the command palette's entry. The
`MainScreen.BINDINGS`, the `MtpTuneApp.BINDINGS`, the help screen's table and the palette's commands
are all built from `ACTIONS`, so a key is written down once and a user's keymap shows everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding

#: The id prefix of an action's second key, the one that also works while typing in a field.
TYPING = "typing."


@dataclass(frozen=True)
class KeyAction:
    """One action reachable from the keyboard. `scope` "main": a `MainScreen` key (inert on every
    other screen); "app": an App key (every screen)."""

    id: str
    action: str
    key: str
    label: str
    help: str
    typing_key: str = ""  # F-keys: a priority binding with id `typing.<id>`, fired even in a field
    footer: bool = True
    scope: str = "main"
    palette: tuple[str, str] | None = None  # (title, help) in the command palette
    key_display: str | None = None


ACTIONS: tuple[KeyAction, ...] = (
    KeyAction("launch", "launch", "l", "Launch", "launch llama-server with the settings on screen", "f5",
              palette=("Launch server", "start llama-server with the settings on screen")),
    KeyAction("restart", "restart", "r", "Restart",
              "restart it with the settings on screen (fields marked ↻ need this)", "f6",
              palette=("Restart server", "restart llama-server with the settings on screen")),
    KeyAction("stop", "stop_server", "s", "Stop", "stop it (SIGTERM, grace period, SIGKILL)", "f7",
              palette=("Stop server", "stop llama-server")),
    KeyAction("probe", "run_probes", "p", "Probe", "run the chosen probe suite", "f8",
              palette=("Run probes", "run the chosen probe suite")),
    KeyAction("cancel", "cancel_probes", "x", "Cancel", "cancel the probe run", "f9", footer=False,
              palette=("Cancel probes", "cancel the probe run")),
    KeyAction("log", "raw_log", "o", "Log", "the whole server log of this launch",
              palette=("Server log", "the whole server log")),
    KeyAction("memory", "memory", "m", "Memory",
              "memory after a launch: estimate, exact (llama.cpp), reported (and NVML on a GPU) side by side",
              footer=False, palette=("Memory after launch", "estimate, exact, reported (and NVML) side by side")),
    KeyAction("runs", "runs", "h", "Runs", "runs: history, compare two, export",
              palette=("Runs", "history, compare, export")),
    KeyAction("sweep", "sweep", "w", "Sweep",
              "sweep: axes over the knobs that matter, planned, run, best saved (keeps running behind)",
              palette=("Sweep", "axes over the knobs that matter, planned, measured, best saved")),
    KeyAction("ab", "mtp_ab", "a", "MTP on/off", "MTP on vs off: interleaved passes, the verdict for your workload",
              palette=("MTP on vs off", "interleaved passes, the verdict for your workload")),
    KeyAction("search_ctx", "search_ctx", "c", "Largest ctx",
              "search the largest context that fits (plan, then a launch); Enter puts it in the form", footer=False,
              palette=("Largest context", "the largest --ctx-size that fits (plan, then a launch)")),
    KeyAction("search_fit", "search_fit", "F", "Smallest fit-target",
              "search the smallest `--fit-target` that survives the first decode; Enter puts it in the form",
              footer=False,
              palette=("Smallest fit-target", "the smallest --fit-target that survives the first decode")),
    KeyAction("tune", "tune", "T", "Tune",
              "tune for me: search the best configuration for a workload (MTP on and off, ubatch, KV types…), "
              "planned before each launch, raced within the noise, the A/B at the end",
              footer=False,  # the footer is full at 120 columns
              palette=("Tune for me", "an MTP-aware search for the best configuration for a workload")),
    KeyAction("profiles", "profiles", "f", "Profiles",
              "profiles: save TOML, write a `--models-preset` INI section, load, import a command line",
              palette=("Profiles", "save TOML, write INI section, load, import command line")),
    KeyAction("variants", "variants", "v", "Variants",
              "variants: every quant of the hf-repo planned side by side from the headers (no download); "
              "Enter puts the chosen file in the form",
              footer=False,  # the footer is full at 120 columns: one more key would cut Help and Quit
              palette=("Variants", "every quant of the hf-repo planned side by side, before any download")),
    KeyAction("edit", "edit", "e", "Edit",
              "edit settings (`↑`/`↓` move between fields, `j`/`k` too outside a text field; `Escape` leaves)"),
    KeyAction("find_field", "find_field", "slash", "Find field",
              "go to a settings field by name or flag: type to filter, `Enter` goes there", "ctrl+f",
              footer=False, key_display="/",
              palette=("Go to field", "jump to a settings field by its name or llama-server flag")),
    KeyAction("theme", "app.next_theme", "t", "Theme", 'next theme (all themes: command palette → "theme")',
              palette=("Next theme", "cycle mtp-tune's themes")),
    KeyAction("help", "help", "question_mark", "Help", "this help", "f1", key_display="?"),
    KeyAction("palette", "command_palette", "ctrl+p", "palette", "command palette: every action by name", "ctrl+p",
              footer=False, scope="app"),
    KeyAction("quit", "quit", "q", "Quit", "quit, stopping the server mtp-tune started", "ctrl+q", scope="app"),
)


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
    return frozenset([a.id for a in ACTIONS] + [TYPING + a.id for a in ACTIONS if a.typing_key != a.key and a.typing_key])


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


def _keys(keymap: Mapping[str, str], binding_id: str, default: str) -> str:
    keys = keymap.get(binding_id, default)
    return " ".join(f"`{key_label(k.strip())}`" for k in keys.split(",") if k.strip())


def help_rows(keymap: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(id, keys, keys while typing, what it does) per action, with the user's keymap applied."""
    rows = []
    for a in ACTIONS:
        typing_id = a.id if a.typing_key == a.key else TYPING + a.id
        typing = _keys(keymap, typing_id, a.typing_key) if a.typing_key else ""
        rows.append((a.id, _keys(keymap, a.id, a.key), typing, a.help))
    return rows


def help_table(keymap: Mapping[str, str]) -> str:
    """The help screen's key table (Markdown)."""
    lines = ["| key | while typing | action | `[keymap]` id |", "|---|---|---|---|"]
    lines += [f"| {keys} | {typing} | {text} | {_id} |" for _id, keys, typing, text in help_rows(keymap)]
    return "\n".join(lines)


def palette(scope: str) -> list[KeyAction]:
    """The actions of `scope` that the command palette offers."""
    return [a for a in ACTIONS if a.scope == scope and a.palette is not None]

