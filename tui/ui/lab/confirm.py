"""The two questions around an experiment that needs the user's own llama-server stopped.

Before: `ConfirmStop` names what runs and says the server will be stopped (cancelling leaves it
running). After: `RestartPrompt` offers to launch it again with the settings it ran with (through
the cockpit's launch path). `confirm_then` asks only when the server runs; otherwise it just starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.core.options.settings import Settings
from tui.ui.format import markup_safe


def server_label(settings: Settings | None) -> str:
    """How the question names the user's server: its model (a file's name, or the repo)."""
    model = settings and (settings.hf_repo or (Path(settings.model).name if settings.model else ""))
    return f"llama-server ({model})" if model else "llama-server"


def answers(screen: str, yes: str, no: str) -> list[Binding]:
    """`y` answers yes; `n` and Escape no."""
    return [Binding("y", "answer(True)", yes, id=f"{screen}.yes"),
            Binding("n,escape", "answer(False)", no, id=f"{screen}.no")]


class Question(ModalScreen[bool]):
    """A yes/no question with two buttons (the safe one focused): `YES` and `NO` label them."""

    DEFAULT_CSS = """
    Question { align: center middle; }
    Question > Vertical { width: 72; height: auto; border: round $warning; background: $surface; padding: 1 2; }
    Question #question { height: auto; margin-bottom: 1; }
    Question Horizontal { height: auto; align: right middle; }
    Question Button { margin-left: 2; }
    """
    YES = "Yes"
    NO = "No"

    def __init__(self, what: str, text: str) -> None:
        super().__init__()
        self.text = what[:1].upper() + what[1:] + text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(markup_safe(self.text, keep_lines=True), id="question")
            with Horizontal():
                yield Button(self.NO, id="no")
                yield Button(self.YES, id="yes", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ConfirmStop(Question):
    """"Run X? Your llama-server will be stopped." Dismissed with True to go ahead."""

    BINDINGS = answers("confirm_stop", "Stop it and run", "Cancel")
    YES = "Stop it and run"
    NO = "Cancel"

    def __init__(self, what: str, running: Settings | None) -> None:
        super().__init__(what, f" launches its own llama-server, so your {server_label(running)} will be stopped "
                         "first.\nWhen it ends you will be offered to restart your server with the same settings.")


class RestartPrompt(Question):
    """"X is over: restart your llama-server with the settings it ran with?" True: restart it."""

    BINDINGS = answers("restart_prompt", "Restart", "Keep it stopped")
    YES = "Restart it"
    NO = "Keep it stopped"

    def __init__(self, what: str, settings: Settings) -> None:
        super().__init__(what, f" is over. Your {server_label(settings)} was stopped for it; "
                         "restart it with the settings it ran with?")


def confirm_then(app: App[Any], stops_server: bool, what: str, running: Settings | None, go: Callable[[], None]) -> None:
    """`go()` at once when nothing of the user's would be stopped; else after `ConfirmStop` says yes
    (no: nothing runs and the server keeps running)."""
    if not stops_server:
        go()
        return

    def answered(yes: bool | None) -> None:
        if yes:
            go()

    app.push_screen(ConfirmStop(what, running), answered)
