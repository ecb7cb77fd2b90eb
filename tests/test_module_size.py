"""No module over 400 lines in tui/, tests/ or bench/: a bigger one holds more than one concern; split it.

The limit counts physical lines (what `wc -l` shows), docstrings and comments included, so it cannot
be met by squeezing code onto fewer lines without the file getting shorter to read as well.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("tui", "tests", "bench")
MAX_LINES = 400


def oversized(root: Path = ROOT, trees: tuple[str, ...] = TREES, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(path relative to root, line count) for every .py file under `trees` longer than `limit`, longest first."""
    found = []
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                found.append((path.relative_to(root).as_posix(), n))
    return sorted(found, key=lambda item: (-item[1], item[0]))


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "tui" / "sub").mkdir(parents=True)
    (tmp_path / "tui" / "sub" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "tui" / "ok.py").write_text("x = 1\n" * 400)
    (tmp_path / "tui" / "notes.txt").write_text("x\n" * 1000)
    assert oversized(tmp_path, ("tui",)) == [("tui/sub/long.py", 401)]


def test_the_trees_are_there() -> None:
    assert all((ROOT / t).is_dir() and any((ROOT / t).rglob("*.py")) for t in TREES)


def test_no_module_over_400_lines() -> None:
    big = oversized()
    assert not big, f"modules over {MAX_LINES} lines (split each by concern): " + ", ".join(f"{p} ({n})" for p, n in big)
