"""The settings form: every knob of `Settings`, grouped, with the reason for a bad value next to it.

The form only turns text into a `Settings` and reports it upward (`SettingsForm.Changed`); the App
validates with the core, then hands problems and the running server's settings back down
(`show_problems`, `mark_running`). Kept lean (one row, one label, one input per field; problem lines
mounted only when there is a problem), because its widget count is most of the start-up time.

Keys as a list of fields is driven in htop or k9s: the focused row is highlighted, up/down (and j/k
outside a text field, where letters are typed) move between fields rather than scroll, `/` (ctrl+f
while typing) jumps to a field by name. A problem is one line (the whole text in its tooltip), so a
typo does not push the form down; a model path longer than its input is shown whole under it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.events import Resize
from textual.widgets import Input, Label, Static, Switch

from tui.core.options.settings import Settings
from tui.ui.widgets.inputs import TextInput
from tui.ui.cockpit.field_picker import FieldPicker
from tui.ui.cockpit.settings_fields import ALL_FIELDS, BOOL_KINDS, GROUPS, FormField, parse_text, to_text

RESTART_MARK = " ↻"
#: Groups composed before the first frame; the others are mounted right after it.
EAGER_GROUPS = 3
#: The field whose whole value is shown on a line under it when longer than its input.
PATH_FIELD = "model"


@dataclasses.dataclass(frozen=True)
class FieldProblem:
    """A problem shown under one field. `severity` is "error" or "warning"."""

    field: str
    severity: str
    message: str


class SettingsForm(VerticalScroll):
    """Grouped inputs for every Settings field."""

    DEFAULT_CSS = """
    SettingsForm { border: round $foreground 25%; padding: 0 1; scrollbar-size-vertical: 1; }
    SettingsForm:focus-within { border: round $primary; }
    SettingsForm .group-title { color: $primary; text-style: bold; margin-top: 1; }
    SettingsForm .group-title.-first { margin-top: 0; }
    SettingsForm .row { height: 1; }
    SettingsForm .row > .field-label { width: 20; color: $foreground; }
    SettingsForm .row:focus-within { background: $accent 20%; }
    SettingsForm .row:focus-within > .field-label { color: $text-accent; text-style: bold; }
    SettingsForm .row.-restart > .field-label { color: $warning; text-style: bold; }
    SettingsForm .row.-error > .field-label { color: $error; }
    SettingsForm .row > Input { width: 1fr; }
    SettingsForm .row > Switch { border: none; height: 1; padding: 0; width: auto; }
    SettingsForm .problem { padding-left: 2; height: 1; text-wrap: nowrap; text-overflow: ellipsis; color: $error; }
    SettingsForm .problem.-warning { color: $warning; }
    SettingsForm .detail { padding-left: 2; height: auto; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "leave", "Leave form", id="form.leave"),
        # j/k reach here only from a switch: a text field types them (its own key handler stops them)
        Binding("down,j", "move_field(1)", "Next field", show=False, id="form.next"),
        Binding("up,k", "move_field(-1)", "Previous field", show=False, id="form.previous"),
    ]

    class Changed(Message):
        """The settings on screen changed; `parse_errors` are fields whose text is not a value."""

        def __init__(self, form: SettingsForm, settings: Settings, parse_errors: tuple[FieldProblem, ...],
                     field: str | None) -> None:
            super().__init__()
            self.form = form
            self.settings = settings
            self.parse_errors = parse_errors
            self.field = field

        @property
        def control(self) -> SettingsForm:
            return self.form

    def __init__(self, settings: Settings | None = None, *, lazy: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lazy = lazy
        self._initial = settings or Settings()
        self._restart_fields: frozenset[str] = frozenset()
        self._problems: dict[str, FieldProblem] = {}
        self._running_settings: Settings | None = None  # not `_running`: Textual's MessagePump owns that name (its loop flag)
        self._complete = False  # all groups mounted
        self._controls: dict[str, Widget] = {}
        self._labels: dict[str, Label] = {}
        self._rows: dict[str, Horizontal] = {}
        self._detail: Static | None = None  # the model path in full, under its field
        self._reload_when_complete = False

    def compose(self) -> ComposeResult:
        eager = EAGER_GROUPS if self._lazy else len(GROUPS)
        for i, (title, fields) in enumerate(GROUPS[:eager]):
            yield from self._group(i, title, fields)

    def _group(self, index: int, title: str, fields: tuple[FormField, ...]) -> list[Widget]:
        out: list[Widget] = [Static(title, classes="group-title -first" if index == 0 else "group-title")]
        for f in fields:
            label = Label(f.label, classes="field-label", id=f"label-{f.name}")
            control = self._control(f, getattr(self._initial, f.name))
            row = Horizontal(label, control, classes="row", id=f"row-{f.name}")
            # Kept by name: a DOM query per field and keystroke costs ~1 ms each.
            self._labels[f.name], self._controls[f.name], self._rows[f.name] = label, control, row
            out.append(row)
            if f.name == PATH_FIELD:
                self._detail = Static("", classes="detail", id=f"detail-{f.name}")
                self._detail.display = False
                out.append(self._detail)
        return out

    def on_mount(self) -> None:
        self.border_title = "Settings · e edit · ↑↓ move · / find"
        self.call_after_refresh(self._show_whole_path)
        if self._lazy:
            self.call_after_refresh(self._mount_rest)
        else:
            self._complete = True

    def _mount_rest(self) -> None:
        """The groups below the fold, after the first frame (inputs are the costliest widgets to mount)."""
        widgets = [w for i, (title, fields) in enumerate(GROUPS) if i >= EAGER_GROUPS
                   for w in self._group(i, title, fields)]
        self.mount_all(widgets)
        self._complete = True
        self.call_after_refresh(self._after_rest)

    def _after_rest(self) -> None:
        if self._reload_when_complete:
            self._reload_when_complete = False
            self.load(self._initial)
        running = self._running_settings
        self._problems, problems = {}, self._problems
        self.show_problems(problems.values())
        self._restart_fields = frozenset()
        self.mark_running(running)

    @staticmethod
    def _control(f: FormField, value: Any) -> Widget:
        wid = f"f-{f.name}"
        tooltip = f"--{f.label}" + (f": {f.help}" if f.help else "")
        if f.choices:
            tooltip += "\none of: " + ", ".join(f.choices)
        if f.kind in BOOL_KINDS:
            w: Widget = Switch(bool(value), id=wid, animate=False)
        else:
            suggester = SuggestFromList(f.choices, case_sensitive=False) if f.choices else None
            text = to_text(f, value)
            w = TextInput(text, placeholder=f.placeholder, id=wid, password=f.name == "api_key",
                          suggester=suggester, select_on_focus=False, compact=True)
            w.cursor_position = len(text)
        w.tooltip = tooltip
        return w

    # --- reading -----------------------------------------------------------------------------------

    def _mounted(self, name: str) -> Widget | None:
        w = self._controls.get(name)
        return w if w is not None and w.is_mounted else None

    def _raw(self, f: FormField) -> Any:
        w = self._mounted(f.name)
        if w is None:  # not mounted yet: the value it will be created with
            value = getattr(self._initial, f.name)
            return bool(value) if f.kind in BOOL_KINDS else to_text(f, value)
        if isinstance(w, Switch):
            return w.value
        assert isinstance(w, Input)
        return w.value

    def read(self) -> tuple[Settings, tuple[FieldProblem, ...]]:
        """The Settings the form shows now; text that is not a value is kept for validation to name."""
        values: dict[str, Any] = {}
        errors: list[FieldProblem] = []
        for name, f in ALL_FIELDS.items():
            raw = self._raw(f)
            if f.kind in BOOL_KINDS:
                values[name] = bool(raw)
                continue
            value, err = parse_text(f, raw)
            if err:
                errors.append(FieldProblem(name, "error", err))
            values[name] = value
        return Settings(**values), tuple(errors)

    # --- attributes down ---------------------------------------------------------------------------

    def load(self, settings: Settings) -> None:
        """Show `settings` in every field (no Changed per field; one Changed at the end)."""
        self._initial = settings
        with self.prevent(Input.Changed, Switch.Changed):
            for name, f in ALL_FIELDS.items():
                w = self._mounted(name)
                if w is None:
                    self._reload_when_complete = True  # re-applied once the rest is mounted
                    continue
                value = getattr(settings, name)
                if isinstance(w, Switch):
                    w.value = bool(value)
                elif isinstance(w, Input):
                    w.value = to_text(f, value)
                    w.cursor_position = len(w.value)
                    if isinstance(w, TextInput):
                        w.call_after_refresh(w.show_end)  # paths: show the file name, not the root
        self._show_whole_path()
        self._emit(None)

    def show_problems(self, problems: Iterable[FieldProblem]) -> None:
        """Show each field's first error (or its first warning) on a line under the field."""
        by_field: dict[str, FieldProblem] = {}
        for p in problems:
            old = by_field.get(p.field)
            if old is None or (old.severity != "error" and p.severity == "error"):
                by_field[p.field] = p
        if by_field == self._problems and self._complete:
            return
        for name in set(self._problems) | set(by_field):
            if name not in ALL_FIELDS:
                continue
            old, new = self._problems.get(name), by_field.get(name)
            if old == new:
                continue
            row = self._rows.get(name)
            if row is None or not row.is_mounted:
                continue  # shown when the rest of the form mounts
            row.set_class(bool(new and new.severity == "error"), "-error")
            existing = self.query(f"#problem-{name}")
            if new is None:
                existing.remove()
                continue
            text = Content(f"{'✖' if new.severity == 'error' else '⚠'} {new.message}")
            if existing:
                line = existing.first(Static)
                line.update(text)
            else:
                line = Static(text, classes="problem", id=f"problem-{name}")
                self.mount(line, after=row)
            line.tooltip = new.message  # the line is cut to one row; its whole text here
            line.set_class(new.severity == "warning", "-warning")
        self._problems = by_field

    def mark_running(self, running: Settings | None) -> frozenset[str]:
        """Mark fields whose value differs from the running server's ("restart needed")."""
        self._running_settings = running
        current, _ = self.read()
        changed: set[str] = set()
        if running is not None:
            for name in ALL_FIELDS:
                if name == "port" and current.port is None:
                    continue  # a free port was picked at launch
                if getattr(current, name) != getattr(running, name):
                    changed.add(name)
        for name in changed ^ self._restart_fields:
            f = ALL_FIELDS[name]
            label = self._labels.get(name)
            if label is None or not label.is_mounted:
                continue
            label.update(f.label + RESTART_MARK if name in changed else f.label)
            label.tooltip = "differs from the running server: restart (r) to apply" if name in changed else None
            self._rows[name].set_class(name in changed, "-restart")
        self._restart_fields = frozenset(changed)
        return self._restart_fields

    @property
    def restart_fields(self) -> frozenset[str]:
        return self._restart_fields

    # --- messages up -------------------------------------------------------------------------------

    def announce(self) -> None:
        """Report the settings on screen as they are (validation and the first plan follow)."""
        self._emit(None)

    def _emit(self, field: str | None) -> None:
        settings, errors = self.read()
        self.post_message(self.Changed(self, settings, errors, field))

    @on(Input.Changed)
    @on(Switch.Changed)
    def _field_changed(self, event: Input.Changed | Switch.Changed) -> None:
        event.stop()
        wid = event.control.id or ""
        name = wid[2:] if wid.startswith("f-") else None
        if name == PATH_FIELD:
            self._show_whole_path()
        self._emit(name)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.screen.focus_next()

    def action_leave(self) -> None:
        """Escape: give the keys back to the app's bindings (l, r, s, p... act again)."""
        self.screen.set_focus(None)

    def focus_field(self, name: str) -> None:
        """Focus one field's control (the screen scrolls it into view)."""
        self.query_one(f"#f-{name}").focus()

    def action_move_field(self, step: int) -> None:
        """Up/down: the previous or next field (the first one from the form itself)."""
        names = [n for n in ALL_FIELDS if self._mounted(n) is not None]
        focused = self.screen.focused
        here = next((i for i, n in enumerate(names) if self._controls[n] is focused), None)
        if not names:
            return
        target = 0 if here is None else max(0, min(len(names) - 1, here + step))
        if here == 0 and step < 0:
            self.scroll_home(animate=False)  # the first group's title back in view
        self.focus_field(names[target])

    def pick_field(self) -> None:
        """Open the field picker; the chosen field gets the focus."""
        self.app.push_screen(FieldPicker(), lambda name: self.focus_field(name) if name else None)

    # --- the model path, whole ---------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self._show_whole_path()

    def _show_whole_path(self) -> None:
        """The model path in full: in the input's tooltip always, and on a line under the field while
        it is longer than the input (a path cut at both ends names no file)."""
        w, detail = self._mounted(PATH_FIELD), self._detail
        if not isinstance(w, Input) or detail is None or not detail.is_mounted:
            return
        f = ALL_FIELDS[PATH_FIELD]
        value = w.value.strip()
        help_text = f"--{f.label}" + (f": {f.help}" if f.help else "")
        w.tooltip = f"{value}\n{help_text}" if value else help_text
        width = w.content_region.width
        long = bool(value) and width > 0 and Content(value).cell_length >= width
        if long:
            detail.update(Content(f"↳ {value}"))
        detail.display = long
