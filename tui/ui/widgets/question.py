"""One modal question before something that cannot be taken back (a launch the plan says will run
out of memory, quitting with a run in flight): what will happen and why, then one button per answer.

Why one widget: every "are you sure" in the app looks and answers the same way. The first answer
holds the focus, so Enter picks it; each answer's own key picks it from anywhere; Escape (and `q`, `n`)
go back, which is always the answer that changes nothing (`None`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.ui.format import markup_safe


@dataclass(frozen=True)
class Answer:
    """One way out of a `Question`: `key` picks it (besides its button), `value` is what it returns."""

    value: str
    label: str
    key: str = ""
    variant: str = "default"  # Button variant: "warning" for the risky one


class Question(ModalScreen[str | None]):
    """`title`, then `lines` (the reasons, one paragraph each), then the answers' buttons and keys.
    Dismissed with the chosen answer's `value`, or None for Escape/`q`/`n`/the Back button."""

    DEFAULT_CSS = """
    Question { align: center middle; }
    Question > Vertical { width: 84; max-width: 95%; height: auto; max-height: 90%; border: round $warning;
                          background: $surface; padding: 1 2; }
    Question #question-title { text-style: bold; color: $warning; height: auto; margin-bottom: 1; }
    Question #question-text { height: auto; margin-bottom: 1; }
    Question #question-keys { color: $foreground-muted; height: auto; margin-bottom: 1; }
    Question Horizontal { height: auto; align: right middle; }
    Question Button { margin-left: 2; }
    """

    def __init__(self, title: str, lines: Sequence[str], answers: Sequence[Answer], back: str = "Back") -> None:
        super().__init__()
        self.title_text = title
        self.lines = tuple(lines)
        self.answers = tuple(answers)
        self.back = back

    def compose(self) -> ComposeResult:
        keys = [f"{'Enter' if i == 0 else a.key} {a.label}" for i, a in enumerate(self.answers) if i == 0 or a.key]
        with Vertical():
            yield Static(markup_safe(self.title_text), id="question-title")
            yield Static(markup_safe("\n\n".join(self.lines), keep_lines=True), id="question-text")
            yield Static(markup_safe(" · ".join([*keys, f"Esc {self.back.lower()}"])), id="question-keys")
            with Horizontal():
                yield Button(self.back, id="question-back")
                for i, a in enumerate(self.answers):
                    yield Button(a.label, id=f"question-{i}", variant=a.variant)  # type: ignore[arg-type]

    @property
    def text(self) -> str:
        """What the question says (its title and reasons), as plain text: what a test or a capture reads."""
        return "\n".join((self.title_text, *self.lines))

    def on_mount(self) -> None:
        if self.answers:
            self.query_one("#question-0", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        bid = event.button.id or ""
        self.dismiss(None if bid == "question-back" else self.answers[int(bid.rsplit("-", 1)[1])].value)

    def on_key(self, event: events.Key) -> None:
        if event.key in ("escape", "q", "n"):
            event.stop()
            self.dismiss(None)
            return
        for a in self.answers:
            if a.key and event.key == a.key:
                event.stop()
                self.dismiss(a.value)
                return
