"""Textual UI: widgets post messages, handlers own state; all logic lives in tui.core."""
