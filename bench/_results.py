"""Append a benchmark's results to bench/RESULTS.md under its own `## heading`, leaving the rest as is."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def append_under(heading: str, text: str, path: Path = RESULTS) -> None:
    """Add `text` at the end of the `heading` section (created at the end of the file if missing)."""
    body = path.read_text() if path.exists() else "# Benchmark results\n"
    if heading not in body:
        body = body.rstrip("\n") + f"\n\n{heading}\n"
    start = body.index(heading) + len(heading)
    nxt = body.find("\n## ", start)
    end = len(body) if nxt < 0 else nxt
    path.write_text(body[:end].rstrip("\n") + "\n\n" + text.strip("\n") + "\n" + body[end:])


def publish(heading: str, text: str, write: bool = True) -> None:
    """Print a benchmark's section and, unless told not to (`--no-write`), append it under `heading`."""
    print(text)
    if write:
        append_under(heading, text)
