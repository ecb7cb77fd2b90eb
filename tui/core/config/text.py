"""Text from outside (a Hub listing, a GGUF header, a server's error body) made safe to show.

Why: a file name, a repo name, `general.name` or an HTTP error body is written by whoever made the
file or runs the server. Printed raw, `\\x1b]0;title\\x07` retitles the terminal, `\\x1b[2J` clears
it, a bare `\\r` overwrites the line before it, a bidi override (U+202E) shows a name backwards and
a lone surrogate (a file name decoded with `surrogateescape`) makes `print` raise. Every such
character is shown escaped (`\\x1b`, `\\u202e`) rather than dropped, so the name on screen is still
the name on the server, character for character, and a strange one looks strange. The TUI adds its
own step (Textual's markup escaping, `tui.ui.format`); this module stays free of any UI library.
"""

from __future__ import annotations

import re

#: C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), the bidi embeddings, overrides, isolates
#: and marks, the Unicode line and paragraph separators, and lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_KEEPING_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe_text(text: object, *, keep_lines: bool = False) -> str:
    """`text` (any object, as `str()` gives it) with every control character, escape sequence
    introducer, bidi control and lone surrogate shown escaped; `keep_lines` keeps newlines and tabs
    (a multi-line body), otherwise they are escaped too (a name stays on one line)."""
    s = text if isinstance(text, str) else str(text)
    pattern = _UNSAFE_KEEPING_LINES if keep_lines else _UNSAFE
    return pattern.sub(_escaped, s) if pattern.search(s) else s
