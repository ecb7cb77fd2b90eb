"""The main screen's key bar: the keys that work and matter now, whole entries only, then Help, Quit
and the command palette.

Textual's `Footer` shows every shown binding in table order and cuts the last one mid-word when the
width runs out (at 100 columns it lost `? Help` and `q Quit`; keys that did not fit at 120 were hidden
at every width). This bar takes its actions from the one key table (`tui.ui.keys.bar`), keeps those the
state needs (a stopped server: Launch; one running: Restart, Stop, Probe; a probe run: Cancel), and
fills the width in rank order with whole entries; the pinned ones (Help, Quit and the palette, which
reaches every action that had no room) always end it.

Which key it shows is the screen's own answer (`Screen.active_bindings`): the user's `[keymap]` key,
and while a field takes the letters the F-key that still works there (`F5 Launch`, `^q Quit`), after
the focused widget's own shown keys (`esc Leave form`). Keys are written as Textual's footer writes
them (`^p`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from textual.binding import Binding
from textual.content import Content
from textual.widget import Widget

from tui.ui import keys
from tui.ui.cockpit.views import ProbeState, ServerStatus

#: Between two entries (one space sits between a key and its word).
GAP = "  "
KEY_STYLE = "bold $footer-key-foreground"
Entry = tuple[str, str]  # (key as shown, label)


def state_tags(server: ServerStatus, probes: ProbeState) -> frozenset[str]:
    """Which of `keys.STATE_TAGS` hold for this server and probe run."""
    tags = {"probing" if probes.running else "idle"}
    if server.alive:
        tags.add("alive")
        if not server.attached:
            tags.add("managed")  # mtp-tune started it: restart and stop are ours
    elif not server.attached and server.state != "stopping":
        tags.add("stopped")  # nothing to stop: a launch is what can happen next
    return frozenset(tags)


def _width(entries: Sequence[Entry]) -> int:
    return sum(cell_len(k) + 1 + cell_len(label) for k, label in entries) + len(GAP) * max(0, len(entries) - 1)


def fit(ranked: Sequence[Entry], pinned: Sequence[Entry], width: int) -> tuple[list[Entry], list[Entry]]:
    """The entries shown in `width` cells: the ranked ones in order up to the first that does not fit
    (a less important key never shows while a more important one is hidden), and the pinned ones; a
    width too small even for those drops them from the front (the palette stays last)."""
    tail = list(pinned)
    while tail and _width(tail) > width:
        tail.pop(0)
    head: list[Entry] = []
    room = width - _width(tail) - (len(GAP) if tail else 0)
    for entry in ranked:
        if _width([*head, entry]) > room:
            break
        head.append(entry)
    return head, tail


class KeyBar(Widget):
    """One line at the bottom of the main screen; `show()` gives it the state, and a resize or a focus
    change (the screen's `bindings_updated_signal`) re-fits it."""

    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-description-foreground;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.tags = state_tags(ServerStatus(), ProbeState())

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self.refresh())

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def show(self, server: ServerStatus, probes: ProbeState) -> None:
        """The keys for this state (re-rendered only when they change)."""
        tags = state_tags(server, probes)
        if tags != self.tags:
            self.tags = tags
            self.refresh()

    def entries(self) -> tuple[list[Entry], list[Entry]]:
        """What the bar would show with room for all: the focused widget's own shown keys and the
        state's ranked actions, then the pinned ones; each with a key that works now."""
        table: dict[str, list[Binding]] = {}
        own: dict[str, Entry] = {}
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if binding.id in keys.BINDING_IDS:
                table.setdefault(binding.id, []).append(binding)
            elif binding.show and active.node not in (self.screen, self.app):
                own.setdefault(binding.action, (self.app.get_key_display(binding), binding.description))
        ranked, pinned = keys.bar(self.tags)

        def working(action: keys.KeyAction) -> Entry | None:
            found = table.get(action.id) or table.get(keys.TYPING + action.id)
            return (self.app.get_key_display(found[0]), action.label) if found else None

        head = [e for e in map(working, ranked) if e is not None]
        tail: dict[str, Entry] = {}
        for entry in map(working, pinned):
            if entry is not None:
                tail.setdefault(entry[1], entry)  # the first of the alternatives that works
        return [*own.values(), *head], list(tail.values())

    def render(self) -> Content:
        width = self.size.width
        head, tail = fit(*self.entries(), width)
        return Content.assemble(*_parts(head), " " * max(0, width - _width(head) - _width(tail)), *_parts(tail))


def _parts(entries: Sequence[Entry]) -> list[str | tuple[str, str]]:
    """`key label` entries for `Content.assemble`, the key bold in the footer's key colour."""
    parts: list[str | tuple[str, str]] = []
    for i, (key, label) in enumerate(entries):
        parts += [GAP, (key, KEY_STYLE), f" {label}"] if i else [(key, KEY_STYLE), f" {label}"]
    return parts
