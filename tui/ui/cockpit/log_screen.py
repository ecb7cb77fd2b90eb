"""The raw server log (`o`): every line of this launch as the server printed it (control characters escaped)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Log, Static

from tui.core.config.text import safe_text


class LogScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    LogScreen { background: $background 60%; }
    LogScreen > #log-path { height: 1; background: $panel; color: $foreground; padding: 0 1; }
    LogScreen > Log { height: 1fr; border: round $primary; }
    """
    BINDINGS = [Binding("escape,q,o", "dismiss", "Close", id="log_screen.close"), Binding("G", "end", "End", id="log_screen.end"), Binding("g", "home", "Top", id="log_screen.top")]

    def __init__(self, lines: list[str], path: str | None) -> None:
        super().__init__()
        self._lines = lines
        self._path = path

    def compose(self) -> ComposeResult:
        where = f"full log file: {self._path}" if self._path else "no log file (the server was not started by mtp-tune)"
        yield Static(Content(where), id="log-path")  # a path is no markup
        yield Log(id="raw-log", highlight=False, auto_scroll=True)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        log = self.query_one(Log)
        log.write_lines([safe_text(line) for line in self._lines] or ["(no server output yet)"])  # the model's text
        log.focus()

    def action_end(self) -> None:
        self.query_one(Log).scroll_end(animate=False)

    def action_home(self) -> None:
        self.query_one(Log).scroll_home(animate=False)
