"""Probe suites: the bundled task suite, the long-prompt (PP) probe, and user suites from TOML or JSONL.

A suite is a list of prompts. Each prompt is sent through the chat template (`messages`) or, for raw
completion, as a plain string (`raw`). A prompt's `kind` says what it measures: `tg` (generation speed
and acceptance) or `pp` (prompt processing; sent with `cache_prompt: false`, and its `timings.cache_n`
must be 0). Every probe request is sent with `cache_prompt: false`, so repeats never reuse the cache.

User suite format (TOML):

    name = "my-suite"              # optional; defaults to the file name
    [[prompts]]
    name = "sql_query"             # required, unique
    prompt = "Write a SQL query ..."   # a user message, or:
    # messages = [{role = "system", content = "..."}, {role = "user", content = "..."}]
    # raw = "text sent to /completion without a chat template"
    kind = "tg"                    # optional: tg (default) | pp
    n_predict = 800                # optional: overrides the run's --n-predict for this prompt

JSONL: one JSON object per line with the same keys as a `[[prompts]]` table; blank lines and lines
starting with `#` are skipped.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

KINDS = ("tg", "pp")
BUILTIN = ("tasks", "long-prompt", "full")
#: Names of the task suite's prompts, as in mtp-bench.py.
TASK_NAMES = (
    "code_python", "code_cpp", "explain_concept", "summarize", "qa_factual",
    "translation", "creative_short", "stepwise_math", "long_code_review",
)
#: Tokens generated after the long prompt: enough to see that the summary starts, cheap next to PP.
LONG_PROMPT_N_PREDICT = 32
LONG_PROMPT_INSTRUCTION = (
    "Summarise this document for an engineering manager who has not read it. Cover the problem it "
    "solves, the main design decisions and their trade-offs, the risks, and the open questions, in "
    "about 300 words.\n\n---\n\n"
)
_ROLES = ("system", "user", "assistant")


class SuiteError(ValueError):
    """A suite file is unreadable or invalid; the message names the file and line."""


@dataclass(frozen=True)
class ProbePrompt:
    """One prompt of a suite. Exactly one of `messages` (chat template) and `raw` is set."""

    name: str
    messages: tuple[dict[str, str], ...] | None = None
    raw: str | None = None
    kind: str = "tg"
    n_predict: int | None = None  # None: the run's n_predict

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def text_chars(self) -> int:
        """Characters of input text (a rough size; count tokens with the server's /tokenize)."""
        if self.raw is not None:
            return len(self.raw)
        return sum(len(m["content"]) for m in self.messages or ())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "n_predict": self.n_predict,
            "chat": self.is_chat,
            "chars": self.text_chars,
        }


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[ProbePrompt, ...]
    description: str = ""
    source: str = "builtin"  # "builtin" or the file path
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_pp(self) -> bool:
        return any(p.kind == "pp" for p in self.prompts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "description": self.description,
            "prompts": [p.to_json() for p in self.prompts],
        }


def _data_text(name: str) -> str:
    return resources.files("tui.core.probes").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def long_document() -> str:
    """The bundled long document (a design document with embedded Python and C++), ~41k characters."""
    return _data_text("long_document.md")


def task_suite() -> Suite:
    """The nine bundled task prompts (see data/tasks.toml)."""
    return load_suite_text(_data_text("tasks.toml"), "tasks.toml", fmt="toml", source="builtin")


def long_prompt_suite(n_predict: int = LONG_PROMPT_N_PREDICT) -> Suite:
    """The PP probe: "summarise this document" over the bundled long document (8k-16k tokens)."""
    prompt = ProbePrompt(
        name="long_document_summary",
        messages=({"role": "user", "content": LONG_PROMPT_INSTRUCTION + long_document()},),
        kind="pp",
        n_predict=n_predict,
    )
    return Suite(
        "long-prompt", (prompt,),
        "Prompt processing over a ~41k-character design document (about 10-11k tokens with a "
        "Qwen-class tokenizer); cache_prompt false, cache_n checked",
    )


def full_suite() -> Suite:
    """Tasks (TG, acceptance) plus the long prompt (PP): one run gives both numbers."""
    t, lp = task_suite(), long_prompt_suite()
    return Suite("full", t.prompts + lp.prompts, "tasks + long-prompt: TG and acceptance plus PP in one run")


def get_suite(spec: str) -> Suite:
    """`tasks`, `long-prompt`, `full`, or the path of a TOML/JSONL file."""
    if spec == "tasks":
        return task_suite()
    if spec == "long-prompt":
        return long_prompt_suite()
    if spec == "full":
        return full_suite()
    path = Path(spec).expanduser()
    if not path.exists():
        raise SuiteError(
            f"--suite {spec}: not a built-in suite ({', '.join(BUILTIN)}) and no such file. "
            "Give one of those names or the path of a .toml or .jsonl suite file."
        )
    return load_suite_file(path)


def load_suite_file(path: str | Path) -> Suite:
    """Read a user suite; the format comes from the extension (.toml, .jsonl/.json)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text (byte {exc.start}). Save the suite file as UTF-8.") from None
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read the suite file ({exc.strerror}).") from None
    ext = path.suffix.lower()
    if ext == ".toml":
        fmt = "toml"
    elif ext in (".jsonl", ".json", ".ndjson"):
        fmt = "jsonl"
    else:
        raise SuiteError(f"{path}: unknown suite format {ext or '(no extension)'}; use a .toml or .jsonl file.")
    return load_suite_text(text, str(path), fmt=fmt, source=str(path))


def load_suite_text(text: str, filename: str, fmt: str, source: str | None = None) -> Suite:
    """Parse suite text; errors name `filename` and the line of the offending entry."""
    if fmt == "toml":
        return _load_toml(text, filename, source or filename)
    if fmt == "jsonl":
        return _load_jsonl(text, filename, source or filename)
    raise SuiteError(f"{filename}: unknown suite format {fmt!r}")


def _load_toml(text: str, filename: str, source: str) -> Suite:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already ends with "(at line L, column C)".
        raise SuiteError(f"{filename}: invalid TOML: {exc}. Fix the syntax there.") from None
    lines = _table_lines(text, "prompts")
    raw_prompts = doc.get("prompts")
    if not isinstance(raw_prompts, list) or not raw_prompts:
        raise SuiteError(
            f"{filename}: no prompts. Add at least one [[prompts]] table with a `name` and a `prompt`."
        )
    for key in doc:
        if key not in ("name", "description", "prompts"):
            raise SuiteError(
                f"{filename}, line {_key_line(text, key)}: unknown top-level key {key!r}; "
                "allowed: name, description, [[prompts]]."
            )
    prompts = []
    for i, entry in enumerate(raw_prompts):
        line = lines[i] if i < len(lines) else 0
        prompts.append(_prompt_from(entry, filename, line))
    suite_name = doc.get("name", Path(filename).stem)
    if not isinstance(suite_name, str) or not suite_name:
        raise SuiteError(f"{filename}, line {_key_line(text, 'name')}: `name` must be a non-empty string.")
    return _finish(suite_name, prompts, str(doc.get("description", "")), source, filename, lines)


def _load_jsonl(text: str, filename: str, source: str) -> Suite:
    prompts: list[ProbePrompt] = []
    lines: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            entry = json.loads(s)
        except json.JSONDecodeError as exc:
            raise SuiteError(
                f"{filename}, line {lineno}: invalid JSON ({exc.msg} at column {exc.colno}). Each line must "
                "be one JSON object like {\"name\": \"...\", \"prompt\": \"...\"}."
            ) from None
        prompts.append(_prompt_from(entry, filename, lineno))
        lines.append(lineno)
    if not prompts:
        raise SuiteError(f"{filename}: no prompts. Add one JSON object per line with a `name` and a `prompt`.")
    return _finish(Path(filename).stem, prompts, "", source, filename, lines)


def _finish(
    name: str, prompts: list[ProbePrompt], description: str, source: str, filename: str, lines: list[int]
) -> Suite:
    seen: dict[str, int] = {}
    for i, p in enumerate(prompts):
        line = lines[i] if i < len(lines) else 0
        if p.name in seen:
            raise SuiteError(
                f"{filename}, line {line}: prompt name {p.name!r} is used twice (first at line {seen[p.name]}); "
                "names must be unique because results are grouped by them."
            )
        seen[p.name] = line
    return Suite(name, tuple(prompts), description, source)


_PROMPT_KEYS = ("name", "prompt", "messages", "raw", "kind", "n_predict")


def _prompt_from(entry: Any, filename: str, line: int) -> ProbePrompt:
    where = f"{filename}, line {line}" if line else filename
    if not isinstance(entry, dict):
        raise SuiteError(f"{where}: a prompt must be a table/object with `name` and `prompt`, not {type(entry).__name__}.")
    unknown = [k for k in entry if k not in _PROMPT_KEYS]
    if unknown:
        raise SuiteError(f"{where}: unknown key {unknown[0]!r} in a prompt; allowed: {', '.join(_PROMPT_KEYS)}.")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SuiteError(f"{where}: every prompt needs a `name` (a non-empty string).")
    given = [k for k in ("prompt", "messages", "raw") if k in entry]
    if len(given) != 1:
        raise SuiteError(
            f"{where}: prompt {name!r} needs exactly one of `prompt` (a user message), `messages` (a chat) "
            f"or `raw` (text without chat template); it has {', '.join(given) or 'none'}."
        )
    messages: tuple[dict[str, str], ...] | None = None
    raw: str | None = None
    if "prompt" in entry:
        text = entry["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise SuiteError(f"{where}: `prompt` of {name!r} must be a non-empty string.")
        messages = ({"role": "user", "content": text.strip()},)
    elif "raw" in entry:
        raw = entry["raw"]
        if not isinstance(raw, str) or not raw:
            raise SuiteError(f"{where}: `raw` of {name!r} must be a non-empty string.")
    else:
        msgs = entry["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise SuiteError(f"{where}: `messages` of {name!r} must be a non-empty list of {{role, content}}.")
        out = []
        for j, m in enumerate(msgs):
            if (
                not isinstance(m, dict)
                or m.get("role") not in _ROLES
                or not isinstance(m.get("content"), str)
                or set(m) - {"role", "content"}
            ):
                raise SuiteError(
                    f"{where}: message {j + 1} of {name!r} must be {{role = system|user|assistant, content = \"...\"}}."
                )
            out.append({"role": m["role"], "content": m["content"]})
        if out[-1]["role"] == "assistant":
            raise SuiteError(f"{where}: the last message of {name!r} is from the assistant; end with a user message.")
        messages = tuple(out)
    kind = entry.get("kind", "tg")
    if kind not in KINDS:
        raise SuiteError(f"{where}: `kind` of {name!r} is {kind!r}; use \"tg\" (generation) or \"pp\" (prompt processing).")
    n_predict = entry.get("n_predict")
    if n_predict is not None and (isinstance(n_predict, bool) or not isinstance(n_predict, int) or n_predict < 1):
        raise SuiteError(f"{where}: `n_predict` of {name!r} must be a positive integer, not {n_predict!r}.")
    return ProbePrompt(name=name.strip(), messages=messages, raw=raw, kind=kind, n_predict=n_predict)


def _table_lines(text: str, table: str) -> list[int]:
    """Line numbers (1-based) of each `[[table]]` header, in order."""
    header = f"[[{table}]]"
    return [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().replace(" ", "") == header]


def _key_line(text: str, key: str) -> int:
    for i, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        if s.startswith("["):
            break
        if s.split("=", 1)[0].strip() == key:
            return i
    return 1
