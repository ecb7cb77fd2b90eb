"""Capture README's "Which file should I download?" table: `.venv/bin/python scripts/variants_table.py`.

Builds a Hub repo of Qwen3.6-35B-A3B quants as shape-only GGUFs (the real tensor tables, so the
real file sizes and memory figures, ~12 MB each on disk; tests/helpers/quant_repo.py), serves it
over loopback with the Hub's routes (tests/helpers/range_server.py: refs, tree, resolve -> 302 ->
blob with Range), and runs the real `mtp-tune variants` against it with `HF_ENDPOINT` pointed
there: the real Hub is never reached. The host RAM is pinned (64 GiB, 60 GiB free), so the table
does not depend on the machine that captured it. Headers are cached in a temporary directory, so
the user's caches are untouched. Prints the Markdown; `--readme` also replaces the table in README.md
between its `<!-- variants-table -->` markers; `--exact` measures every row with llama.cpp's dry run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers: the shape-only quants and the loopback Hub

#: the 2 x V100 16 GB guide's question: which quant and which KV type, at a 100k context, with MTP
ARGS = ["--gpus", "2xv100-16g", "--kv", "f16,q8_0,q4_0", "-c", "100000", "-np", "1",
        "--spec-type", "draft-mtp", "-ctkd", "q8_0", "-ctvd", "q8_0", "--md"]
MARK_START, MARK_END = "<!-- variants-table -->", "<!-- /variants-table -->"
MMPROJ, MMPROJ_BYTES = "mmproj-F16.gguf", 899 * 2**20


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (a hole): only its size is ever looked at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def capture(work: Path, extra: list[str]) -> str:
    """The Markdown `mtp-tune variants` prints for the demo repo (exit status 0 or 1 both print it)."""
    from tests.helpers.quant_repo import REPO, fixed_host, write_quants
    from tests.helpers.range_server import serve
    from tui.cli import main

    files = write_quants(work / "models")
    # the projector a multimodal Qwen3.6 repo ships beside its quants (never read: the listing's size is
    # what the table names; llama-server's -hf would download it with every row)
    files[MMPROJ] = _sparse(work / "models" / MMPROJ, MMPROJ_BYTES)
    os.environ["MTP_TUNE_REMOTE_DIR"] = str(work / "remote")  # not the user's header cache
    os.environ["MTP_TUNE_EXACT_DIR"] = str(work / "exact")  # nor the exact-mode cache
    with serve() as hub, fixed_host():
        hub.add_repo(REPO, files)
        os.environ["HF_ENDPOINT"] = hub.url
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["variants", REPO, *ARGS, *extra])
    if rc not in (0, 1):
        raise SystemExit(f"mtp-tune variants failed (exit {rc})")
    return f"`mtp-tune variants {REPO} {' '.join([*ARGS, *extra])}`\n\n{out.getvalue().strip()}\n"


def update_readme(table: str, readme: Path = ROOT / "README.md") -> None:
    text = readme.read_text()
    start, end = text.find(MARK_START), text.find(MARK_END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme}: no {MARK_START} ... {MARK_END} block to replace")
    readme.write_text(text[: start + len(MARK_START)] + "\n" + table + text[end:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", action="store_true", help="also replace the table in README.md")
    ap.add_argument("--exact", action="store_true", help="measure every row with the llama-server mtp-tune finds "
                    "(llama.cpp's dry run; about 15 s a row)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mtp-tune-variants-") as tmp:
        table = capture(Path(tmp), ["--exact"] if args.exact else [])
    print(table, end="")
    if args.readme:
        update_readme(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
