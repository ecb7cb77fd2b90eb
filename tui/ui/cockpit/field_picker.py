"""Jump to a settings field by name: type to filter, Enter to go (Posting's and k9s's pickers).

Thirty-odd fields were reachable only by Tab. The picker lists every field by its label, its
llama-server spellings and its group, filtered with Textual's fuzzy matcher as the user types
(`ctk` finds cache-type-k by its `-ctk` spelling); it answers the chosen field's name, and the form
focuses it.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.fuzzy import Matcher
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from tui.ui.cockpit.settings_fields import GROUPS, FormField
from tui.ui.widgets.inputs import TextInput


#: The label column's width in the list (the longest label, spec-draft-type-k, and two spaces).
LABEL_W = 20


def _score(matcher: Matcher, group: str, f: FormField) -> float:
    """How well a query matches a field: the best of its label, each llama-server spelling and its
    group, each matched alone (one haystack of all of them matched `kv` to api-key's k and Server's v)."""
    return max(matcher.match(text) for text in (f.label, *f.spellings, group))


def _prompt(group: str, f: FormField, matcher: Matcher | None) -> Content:
    label = matcher.highlight(f.label) if matcher is not None else Content(f.label)
    others = [s for s in f.spellings if s != f"--{f.label}"]  # the label is the long spelling
    flags = ", ".join(others or f.spellings) or "(extra arguments, verbatim)"
    return Content.assemble(label.pad_right(max(1, LABEL_W - label.cell_length)), (flags, "dim"),
                            (f"  · {group}", "dim italic"))


class FieldPicker(ModalScreen[str | None]):
    """A filter box over the list of fields; dismisses with the chosen field's name (None: Escape)."""

    DEFAULT_CSS = """
    FieldPicker { align: center top; }
    FieldPicker > Vertical {
        width: 72; max-width: 100%; height: auto; max-height: 80%; margin-top: 3;
        border: round $primary; background: $surface; padding: 0 1;
    }
    FieldPicker #picker-hint { color: $text-muted; height: 1; }
    FieldPicker OptionList { height: auto; max-height: 20; border: none; padding: 0; }
    """
    BINDINGS = [
        Binding("escape", "dismiss_none", "Close", show=False),
        Binding("down", "move(1)", show=False, priority=True),
        Binding("up", "move(-1)", show=False, priority=True),
    ]

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Go to field"
            yield TextInput(placeholder="type a field name or flag, e.g. ctx or -ctk", id="picker-filter",
                            compact=True)
            yield Static("↑↓ choose · Enter go · Esc close", id="picker-hint")
            yield OptionList(id="picker-list")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one("#picker-filter", Input).focus()

    def _fill(self, query: str) -> None:
        """The fields matching `query`, best first (all of them, in form order, for no query)."""
        matcher = Matcher(query) if query.strip() else None
        rows = [(g, f) for g, fields in GROUPS for f in fields]
        if matcher is not None:
            scored = [(_score(matcher, g, f), i, g, f) for i, (g, f) in enumerate(rows)]
            rows = [(g, f) for score, _i, g, f in sorted(scored, key=lambda s: (-s[0], s[1])) if score > 0]
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(_prompt(g, f, matcher), id=f.name) for g, f in rows])
        if rows:
            options.highlighted = 0

    @on(Input.Changed, "#picker-filter")
    def _filter(self, event: Input.Changed) -> None:
        event.stop()
        self._fill(event.value)

    @on(Input.Submitted, "#picker-filter")
    def _submit(self, event: Input.Submitted) -> None:
        event.stop()
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            self.dismiss(options.get_option_at_index(options.highlighted).id)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_move(self, step: int) -> None:
        """Up and down move the highlight while the focus stays in the filter box."""
        options = self.query_one(OptionList)
        if options.option_count:
            current = options.highlighted if options.highlighted is not None else -1
            options.highlighted = max(0, min(options.option_count - 1, current + step))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
