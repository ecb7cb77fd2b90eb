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
    assert "tui.core.server.provision" in mods and "tui.core.demo.tiny_model" in mods


def test_core_does_not_import_textual_or_rich() -> None:
    """click is hidden: httpx imports its own command line (`httpx._main`: rich, click, pygments) when
    click is installed, and huggingface_hub brings click; that shim is httpx's import, not core's."""
    mods = _core_modules()
    code = (
        "import importlib, sys\n"
        "sys.modules['click'] = None\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"tui.core pulled in: {out.stdout.strip()}"


def test_test_fixtures_are_not_in_the_package() -> None:
    """The shape-only model writer and the fixed UI screens live under tests/helpers (issue 12)."""
    import importlib.util
    from pathlib import Path

    mods = _core_modules()
    assert "tui.core.shapemodel" not in mods and "tui.core.planning.plan" in mods
    assert importlib.util.find_spec("tui.ui.samples") is None
    pkg = Path(tui.core.__file__).resolve().parents[1]
    offenders = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                 if "from tests" in p.read_text(encoding="utf-8") or "import tests" in p.read_text(encoding="utf-8")]
    assert offenders == [], f"the package imports test helpers: {offenders}"
