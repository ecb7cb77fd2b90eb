"""What the screens of a lab action (sweep, MTP on/off verdict, tune) share: the lab controller they
are given (it owns the running action and its view), the size classes their CSS lays out by, their
keys, and the way from `g` to a running action: refused in a fixed preview (a snapshot's screen) or
while another runs, and asked first when it would stop the user's own server (`confirm_then`).

`SetupScreen` adds a setup form (sweep, tune) checked on a worker as it changes; only the newest
check is shown, so a slow one (a grid's plans, a remote header) never overwrites a newer answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import on, work
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Checkbox, DataTable, Input, Label, ProgressBar, Select, Static

from tui.core.options.settings import Settings
from tui.ui.lab.confirm import confirm_then
from tui.ui.lab.controller import LabController
from tui.ui.lab.messages import Checked, Kept
from tui.ui.widgets.inputs import TextInput

#: below these the screens stack (`-narrow`) or drop their plot (`-short`)
NARROW_WIDTH = 110
SHORT_HEIGHT = 34


def keys(screen: str, run: str, run_text: str, *more: Binding, f5: str = "Run",
         typing: tuple[Binding, ...] = ()) -> list[Binding]:
    """Escape back, `g` runs, `x` cancels, then `more`; F5 and F9 (then `typing`) do it from inside a field."""
    return [Binding("escape", "back", "Back", id=f"{screen}.back"), Binding("g", run, run_text, id=f"{screen}.run"),
            Binding("x", "cancel", "Cancel", id=f"{screen}.cancel"), *more,
            Binding("f5", run, f5, show=False, priority=True, id=f"{screen}.typing.run"),
            Binding("f9", "cancel", "Cancel", show=False, priority=True, id=f"{screen}.typing.cancel"), *typing]


def text_field(value: str, fid: str, hint: str = "") -> TextInput:
    """A setup form's text field."""
    return TextInput(value, placeholder=hint, id=fid, compact=True, select_on_focus=False)


def row(label: str, widget: Widget, **kw: Any) -> Horizontal:
    """A form's row: its label, then its field."""
    return Horizontal(Label(label), widget, classes="row", **kw)


def progress_row(prefix: str) -> Horizontal:
    """A progress bar and the line beside it (`#PREFIX-progress`, `#PREFIX-progress-text`)."""
    return Horizontal(ProgressBar(total=1, show_eta=False, id=f"{prefix}-progress"),
                      Static("", id=f"{prefix}-progress-text"), id=f"{prefix}-progress-row", classes="progress-row")


class TuningScreen(Screen[None]):
    """A full screen over the main one for a lab action; it keeps running when the screen is left.

    `KIND` is the controller's name of the action, `WHAT` how the question before a stop names it,
    `REFUSED` the title of a refusal; `BORDER_TITLES` maps selectors to their border's title."""

    DEFAULT_CSS = """
    TuningScreen { layout: vertical; }
    TuningScreen > .title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    TuningScreen > .body { height: 1fr; }
    TuningScreen .box { border: round $foreground 25%; padding: 0 1; }
    TuningScreen .box.setup { scrollbar-size-vertical: 1; }
    TuningScreen .box.setup:focus-within { border: round $primary; }
    TuningScreen .setup .row { height: 1; }
    TuningScreen .setup .row > Label { color: $foreground; }
    TuningScreen .setup .row > Input, TuningScreen .setup .row > Select { width: 1fr; }
    TuningScreen .setup .section { color: $primary; text-style: bold; }
    TuningScreen .setup Checkbox { border: none; height: 1; padding: 0; background: transparent; }
    TuningScreen.-narrow .setup { display: none; }
    TuningScreen.-narrow.-editing .setup { display: block; }
    TuningScreen .progress-row { height: 1; }
    TuningScreen .progress-row > ProgressBar { width: 24; }
    TuningScreen .progress-row > Static { width: 1fr; margin-left: 1; color: $foreground-muted; }
    TuningScreen .message { color: $foreground-muted; }
    TuningScreen .message.-error { color: $error; }
    """
    KIND = ""
    WHAT = ""
    REFUSED = ""
    BORDER_TITLES: dict[str, str] = {}

    def __init__(self, lab: LabController, fixed: Any = None) -> None:
        super().__init__()
        self.lab = lab
        self.fixed = fixed  # a fixed view (snapshots, previews): shown as it is, and nothing runs

    def on_mount(self) -> None:
        for selector, title in self.BORDER_TITLES.items():
            self.query_one(selector).border_title = title
        self._apply_size_classes()
        view = self.fixed if self.fixed is not None else self.first_view()
        if view is not None:
            self.show(view)

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(self.app.size.height < SHORT_HEIGHT, "-short")

    # --- what a screen shows -------------------------------------------------------------------

    def show(self, view: Any) -> None:
        raise NotImplementedError

    def live(self, lab: LabController) -> Any:
        """The lab's view this screen follows now (None: keep what is on screen)."""
        raise NotImplementedError

    def first_view(self) -> Any:
        return self.live(self.lab)

    def tuning_changed(self, lab: LabController) -> None:
        """The controller's state changed: its view, when this screen follows it."""
        if self.is_mounted and self.fixed is None and (view := self.live(lab)) is not None:
            self.show(view)

    def say(self, selector: str, text: str, error: bool = False) -> None:
        """One line (or paragraph) of the screen; `error` colours it."""
        line = self.query_one(selector, Static)
        line.update(Content(text))
        line.set_class(error, "-error")

    # --- actions -------------------------------------------------------------------------------

    def ready(self) -> Callable[[], str | None] | None:
        """What `g` starts (it returns why it could not), or None when the screen said why it cannot."""
        raise NotImplementedError

    def refuse(self, reason: str | None) -> bool:
        """Tell why the action cannot run; False (nothing said) when `reason` is None."""
        if reason:
            self.notify(reason, title=self.REFUSED, severity="warning")
        return bool(reason)

    def action_run(self) -> None:
        if self.fixed is not None:
            self.notify("this is a fixed preview; nothing runs", severity="warning")
            return
        start = self.ready()
        if start is not None:
            confirm_then(self.app, self.lab.stops_server(), self.WHAT, self.lab.server.running_settings(),
                         lambda: self.refuse(start()))

    def action_cancel(self) -> None:
        if self.lab.running == self.KIND:
            self.lab.cancel()

    def action_back(self) -> None:
        if isinstance(self.focused, (Input, Select, Checkbox)):  # out of the field first, then off the screen
            self.remove_class("-editing")
            self.set_focus(self.query_one(str(self.AUTO_FOCUS)))
            return
        self.dismiss(None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="keep")
    def keep(self, do: Callable[[], tuple[str | None, str | None]], titles: tuple[str, str], said: str) -> None:
        """`do()` saves the best or writes a report, on a worker; `said` (its `{}` what was written) and
        `titles` (done, failed) are how the screen tells it."""
        done, error = do()
        self.post_message(Kept(titles[1], error, True) if error else Kept(titles[0], said.format(done)))

    @on(Kept)
    def _kept(self, message: Kept) -> None:
        """A worker saved the best or wrote a report (workers never notify: they post `Kept`)."""
        if message.error:
            self.notify(message.text, title=message.title, severity="error", timeout=12)
        else:
            self.notify(message.text, title=message.title, timeout=10)


class SetupScreen(TuningScreen):
    """A lab screen with a setup form over the settings on screen (`read_setup`): every change is
    checked on a worker (`check`: the setup's plan, or why it cannot run, a str), and the newest
    answer is handed to `checked`. `e` goes into the form; `note` says the highlighted row in full."""

    def __init__(self, lab: LabController, settings: Settings, setup: Any, fixed: Any = None) -> None:
        super().__init__(lab, fixed)
        self.settings, self.setup = settings, setup
        self.problem: str | None = None  # why the setup on screen cannot run
        self.checks = 0  # answered checks (tests wait on it)
        self._seq = 0
        self._answered = -1  # the seq of the check on screen
        self._shown: Any = None  # the view on screen

    def on_mount(self) -> None:
        super().on_mount()
        if self.fixed is None:
            self.recheck()

    def read_setup(self) -> Any:
        raise NotImplementedError

    def check(self, settings: Settings, setup: Any) -> Any:
        """On a worker: the setup checked (it may read files and plan), or why it cannot run."""
        raise NotImplementedError

    def checked(self, answer: Any) -> None:
        raise NotImplementedError

    def note(self, row: Any) -> str:
        raise NotImplementedError

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _setup_changed(self) -> None:
        if self.fixed is None and self.is_mounted:
            self.recheck()

    def recheck(self) -> None:
        self.setup = self.read_setup()
        self._seq += 1
        self._check_worker(self._seq, self.settings, self.setup)

    @work(thread=True, exclusive=True, exit_on_error=False, group="setup-check")
    def _check_worker(self, seq: int, settings: Settings, setup: Any) -> None:
        self.post_message(Checked(seq, self.check(settings, setup)))

    @on(Checked)
    def _checked(self, message: Checked) -> None:
        if message.seq < self._seq:
            return
        self._answered = message.seq
        self.checks += 1
        self.problem = message.value if isinstance(message.value, str) else None
        self.checked(message.value)

    @on(DataTable.RowHighlighted)
    def show_note(self) -> None:
        """The highlighted row in full (the table cuts its notes to the column)."""
        view, table = self._shown, self.query_one(str(self.AUTO_FOCUS), DataTable)
        row = view.rows[table.cursor_row] if view is not None and 0 <= table.cursor_row < len(view.rows) else None
        self.query_one(".note", Static).update(Content(self.note(row)))

    def action_edit(self, axis: int = 0) -> None:
        """Into the setup (shown on demand in a narrow terminal), at its text field number `axis`."""
        self.add_class("-editing")
        self.set_focus(self.query(".setup Input")[axis])  # at once: keys typed next go there
