"""Inputs that follow the App's cursor-blink setting (snapshots and screenshots turn blinking off)."""

from __future__ import annotations

from textual.widgets import Input, TextArea


def _blink(widget: Input | TextArea) -> bool:
    return bool(getattr(widget.app, "cursor_blink_enabled", True))


class TextInput(Input):
    """An Input that shows the end of a long value (a model path's file name) until it is edited; its
    placeholder is a dim italic hint ("e.g. 2,3", "default: 2048"), never mistaken for a value."""

    DEFAULT_CSS = """
    TextInput > .input--placeholder { color: $text-muted; text-style: italic; }
    """

    def on_mount(self) -> None:
        self.cursor_blink = _blink(self)
        self.call_after_refresh(self.show_end)

    def show_end(self) -> None:
        if not self.has_focus:
            self.scroll_to(x=self.max_scroll_x, animate=False, immediate=True)


class TextBox(TextArea):
    def on_mount(self) -> None:
        self.cursor_blink = _blink(self)
