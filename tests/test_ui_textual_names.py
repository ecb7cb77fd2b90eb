"""No widget, screen or app of ours assigns a private attribute that Textual's own classes use.

Why: SettingsForm kept the running server's settings in `self._running`, which is MessagePump's
loop flag; Textual set it to True when the form's loop started, and on a busy machine the form's
deferred `_after_rest` then read True as the running Settings (AttributeError: 'bool' object has no
attribute 'model'). A name Textual owns is found here before it races.
"""

from __future__ import annotations

import re
from pathlib import Path

from textual.app import App
from textual.screen import ModalScreen, Screen
from textual.widget import Widget

UI = Path(__file__).resolve().parents[1] / "tui" / "ui"
_ASSIGN = re.compile(r"self\.(_[A-Za-z]\w*)\s*(?::[^=]+)?=(?!=)")


def textual_private_names() -> set[str]:
    """Every single-underscore name a Textual widget, app or screen carries (instance and class)."""
    names: set[str] = set()
    for obj in (Widget(), App()):
        names |= set(vars(obj)) | set(dir(obj))
    for cls in (Screen, ModalScreen):
        names |= set(dir(cls))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def collisions(root: Path, owned: set[str]) -> list[str]:
    """`file:line name` for each `self._name = ...` under `root` whose name Textual owns."""
    out = []
    for p in sorted(root.rglob("*.py")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            out += [f"{p.relative_to(root)}:{i} {m.group(1)}" for m in _ASSIGN.finditer(line) if m.group(1) in owned]
    return out


def test_the_check_finds_a_name_textual_owns(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text("class F:\n    def f(self):\n        self._running: object = None\n"
                                   "        self._mine = 1\n        self._running == 2\n")
    assert collisions(tmp_path, textual_private_names()) == ["w.py:3 _running"]


def test_no_ui_class_assigns_a_private_name_textual_owns() -> None:
    assert collisions(UI, textual_private_names()) == []
