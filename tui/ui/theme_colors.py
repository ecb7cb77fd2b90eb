"""Theme variables as RGB triples, for renderers that take colours directly (plotext)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.style import Style
from textual.color import Color

from tui.ui.themes import SERIES_VARIABLES


def series_rgb(variables: Mapping[str, str]) -> list[tuple[int, int, int]]:
    """The theme's series colours, in order; falls back to $primary for a variable that will not parse."""
    out: list[tuple[int, int, int]] = []
    for name in SERIES_VARIABLES:
        value = variables.get(name) or variables.get("primary") or "white"
        try:
            out.append(Color.parse(value).rgb)
        except Exception:  # noqa: BLE001 - a bad user theme must not break the plot
            out.append((200, 200, 200))
    return out


def rich_style(variables: Mapping[str, str], name: str, *, bold: bool = False) -> Style:
    """A Rich style in the theme colour `name` (alpha dropped: Rich has none); plain when unknown."""
    value = variables.get(name)
    if not value:
        return Style(bold=bold)
    try:
        return Style(color=Color.parse(value).rich_color, bold=bold)
    except Exception:  # noqa: BLE001 - a bad user theme must not break a table
        return Style(bold=bold)
