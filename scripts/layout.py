"""The product's layout in lines: a tree of `tui/` with line counts, the experiments' share, and how many
of each thing the experiments have (trial loops, launcher constructions, ranking rules).

Why a script: the redesign of the experiments into one lab (issue 30) is judged by these numbers before
and after, and a count taken by hand drifts. Lines are physical lines of `*.py` files (blank lines and
docstrings included, as `wc -l` counts them).

    python3 scripts/layout.py [--root .] [--depth 3] [--markdown]

"Experiments" are the sweep, the tune, the A/B and the knob searches: the core packages that run them
and the UI and CLI modules that only serve them, matched by the patterns in EXPERIMENTS (old and new
layouts both, so one script measures both sides of the redesign).
"""

from __future__ import annotations

import argparse
import fnmatch
import re
from pathlib import Path

EXPERIMENTS = (
    "tui/core/lab/*", "tui/core/sweep/*", "tui/core/tuning/*", "tui/core/tune/*",
    "tui/ui/lab/*",
    "tui/ui/adapters/tune.py", "tui/ui/adapters/tuning.py", "tui/ui/controllers/tuning.py",
    "tui/ui/screens/sweep.py", "tui/ui/screens/tune.py", "tui/ui/screens/verdict.py", "tui/ui/screens/search.py",
    "tui/ui/screens/tuning_screen.py", "tui/ui/screens/main_tuning.py",
    "tui/ui/widgets/sweep_*.py", "tui/ui/widgets/tune_*.py", "tui/ui/widgets/tuning_panel.py",
    "tui/ui/tune_view.py", "tui/ui/tuning_view.py",
    "tui/cli/sweep.py", "tui/cli/tune.py",
)

#: what each count looks for in the experiments' code
COUNTS = {
    "launcher constructions": re.compile(r"\b(?:SupervisorBackend|StandInBackend|SupervisorLauncher)\("),
    "launch-history writers (record_history=True or default)": re.compile(r"\bSupervisor\((?![^)]*record_history=False)"),
    "functions that decide 'best'": re.compile(r"^\s*def (?:_?best|choose|_best)\b", re.M),
    "calls of the noise rule (stats.verdict / versus)": re.compile(r"\b(?:verdict|versus)\(\s*\w"),
}


def lines_of(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def is_experiment(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pat) for pat in EXPERIMENTS)


def tree(root: Path, depth: int) -> list[tuple[str, int, int]]:
    """(path, lines, modules) for each folder under tui/ down to `depth`, in tree order."""
    out = []
    base = root / "tui"
    for d in sorted([base, *(p for p in base.rglob("*") if p.is_dir() and "__pycache__" not in p.parts)]):
        rel = d.relative_to(root)
        if len(rel.parts) > depth:
            continue
        files = [f for f in d.rglob("*.py") if "__pycache__" not in f.parts]
        if files:  # a folder left with only bytecode is not part of the product
            out.append((str(rel), sum(lines_of(f) for f in files), len(files)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--depth", type=int, default=3, help="folder depth of the tree (tui/core/lab is 3)")
    ap.add_argument("--markdown", action="store_true", help="a table instead of an indented tree")
    args = ap.parse_args()
    root = args.root.resolve()
    files = [f for f in (root / "tui").rglob("*.py") if "__pycache__" not in f.parts]
    total = sum(lines_of(f) for f in files)
    exp = [f for f in files if is_experiment(str(f.relative_to(root)))]
    exp_lines = sum(lines_of(f) for f in exp)
    if args.markdown:
        print("| folder | lines | modules |\n|---|---|---|")
    for rel, n, m in tree(root, args.depth):
        if args.markdown:
            print(f"| `{rel}` | {n} | {m} |")
        else:
            indent = "  " * (len(Path(rel).parts) - 1)
            print(f"{indent}{Path(rel).name + '/':<24}{n:>7} lines {m:>4} modules")
    print()
    print(f"product: {total} lines in {len(files)} modules")
    print(f"experiments: {exp_lines} lines in {len(exp)} modules")
    text = "\n".join(f.read_text(encoding="utf-8") for f in exp)
    for what, pat in COUNTS.items():
        print(f"  {what}: {len(pat.findall(text))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
