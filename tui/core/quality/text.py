"""The text a quality measurement scores: the user's workload, a file, or the built-in corpus.

Why the workload first: KV-cache sensitivity differs by text (code, long documents), so the figure
that matters is the one on what the user will run. `--workload` is a probe suite (`tasks`,
`long-prompt`, `full` or a .toml/.jsonl file; `probes.suites`) whose prompts are joined; `--text` is
any UTF-8 file; without either, the whole probe workload (`full`: the nine task prompts and the long
document). llama-perplexity needs at least two contexts' worth of tokens; a text too short for even
the smallest context is replaced by the built-in corpus (the bundled long document), and said.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tui.core.probes.suites import Suite, SuiteError, get_suite, long_document

#: the probe workload measured when neither --text nor --workload is given
DEFAULT_WORKLOAD = "full"
#: the largest text file read (a corpus this size already gives thousands of chunks)
MAX_TEXT_BYTES = 64 * 2**20


class TextError(ValueError):
    """The text cannot be read or used; one sentence naming the file or flag."""


@dataclass(frozen=True)
class QualityText:
    """What is scored, where it came from (for the report) and its digest (for the caches)."""

    label: str
    text: str
    note: str = ""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))


def suite_text(suite: Suite) -> str:
    """A suite's prompts as one text: each message's content (or raw prompt), blank-line separated."""
    parts: list[str] = []
    for p in suite.prompts:
        if p.raw is not None:
            parts.append(p.raw)
        for m in p.messages or ():
            parts.append(m["content"])
    return "\n\n".join(s.strip() for s in parts if s.strip())


def corpus() -> QualityText:
    """The built-in corpus: the bundled long document (a design document with Python and C++, ~41 kB)."""
    return QualityText("the built-in corpus (long_document.md)", long_document())


def load_text(text_file: str | None = None, workload: str | None = None) -> QualityText:
    """`--text FILE`, else `--workload SPEC`, else the probe workload (`full`)."""
    if text_file and workload:
        raise TextError("--text and --workload both name the text to score; give one of them.")
    if text_file:
        path = Path(text_file).expanduser()
        try:
            size = path.stat().st_size
            if size > MAX_TEXT_BYTES:
                raise TextError(f"--text {text_file}: {size / 2**20:.0f} MiB, more than the "
                                f"{MAX_TEXT_BYTES // 2**20} MiB read; give a shorter excerpt.")
            data = path.read_bytes()
        except OSError as exc:
            raise TextError(f"--text {text_file}: cannot be read ({exc.strerror or exc}).") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TextError(f"--text {text_file}: not UTF-8 text (byte {exc.start}).") from None
        if not text.strip():
            raise TextError(f"--text {text_file}: the file is empty.")
        return QualityText(f"--text {path}", text)
    spec = workload or DEFAULT_WORKLOAD
    try:
        suite = get_suite(spec)
    except SuiteError as exc:
        raise TextError(str(exc).replace("--suite", "--workload", 1)) from None
    text = suite_text(suite)
    label = f"--workload {spec}" if workload else f"the probe workload ({DEFAULT_WORKLOAD}: task prompts and long document)"
    if not text:
        raise TextError(f"--workload {spec}: its prompts have no text.")
    return QualityText(label, text)


def with_fallback(text: QualityText, est_tokens: int, min_tokens: int) -> QualityText:
    """`text`, or the built-in corpus (said in `note`) when `text` is too short for the smallest measurement."""
    if est_tokens >= min_tokens:
        return text
    c = corpus()
    return QualityText(c.label, c.text, f"{text.label} has about {est_tokens} tokens, fewer than the {min_tokens} "
                                        "that two contexts of the smallest size need: scored the built-in corpus instead")
