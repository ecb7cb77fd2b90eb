"""tui.core is pure domain code: importing any of its modules must not load textual or rich."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tui.core


def _core_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(tui.core.__path__, "tui.core."))


def test_there_are_core_modules() -> None:
    mods = _core_modules()
    assert "tui.core.provision" in mods and "tui.core.tinymodel" in mods


def test_core_does_not_import_textual_or_rich() -> None:
    mods = _core_modules()
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"tui.core pulled in: {out.stdout.strip()}"
