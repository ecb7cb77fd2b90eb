"""Probe suites: the bundled task suite and long document, and user suites with errors naming file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tui.core.probes.suites import (
    LONG_PROMPT_N_PREDICT,
    TASK_NAMES,
    SuiteError,
    full_suite,
    get_suite,
    load_suite_file,
    long_document,
    long_prompt_suite,
    task_suite,
)


def _wordiness(text: str) -> float:
    """Share of whitespace-separated chunks that are plain words (with quotes/punctuation around).

    Real prose scores > 0.9, code 0.6-0.85, random printable tokens about 0.1."""
    chunks = text.split()
    ok = [c for c in chunks if re.fullmatch(r"[(\"'`]*[A-Za-z]+[)\"'`.,:;!?]*", c)]
    return len(ok) / len(chunks)


def test_wordiness_tells_text_from_random_tokens() -> None:
    import random
    import string

    rng = random.Random(0)
    noise = " ".join("".join(rng.choice(string.printable[:94]) for _ in range(rng.randint(2, 8))) for _ in range(500))
    assert _wordiness(noise) < 0.3


def test_task_suite_has_the_mtp_bench_prompts_in_order() -> None:
    s = task_suite()
    assert tuple(p.name for p in s.prompts) == TASK_NAMES
    assert all(p.is_chat and p.kind == "tg" and p.n_predict is None for p in s.prompts)
    assert all(p.messages is not None and p.messages[-1]["role"] == "user" for p in s.prompts)


def test_task_prompts_are_real_text_of_useful_size() -> None:
    for p in task_suite().prompts:
        text = p.messages[0]["content"]  # type: ignore[index]
        assert 400 <= len(text) <= 6000, p.name
        assert _wordiness(text) > 0.55, p.name
        assert text == text.strip()
    review = {p.name: p for p in task_suite().prompts}["long_code_review"].messages[0]["content"]  # type: ignore[index]
    assert review.count("\n") > 100 and "def fetch_all" in review  # a long piece of code to review


def test_long_document_is_prose_and_code_of_the_intended_size() -> None:
    doc = long_document()
    # ~41k characters: 8k-16k tokens at the 2.6-5 characters per token of real BPE tokenizers.
    assert 32_000 <= len(doc) <= 60_000
    assert doc.count("```python") >= 4 and doc.count("```cpp") >= 2
    assert _wordiness(doc) > 0.75
    # No repeated filler: every paragraph of prose appears once.
    paras = [p for p in doc.split("\n\n") if len(p) > 200]
    assert len(paras) == len(set(paras)) and len(paras) > 40


def test_long_prompt_suite_is_one_pp_prompt_over_the_document() -> None:
    s = long_prompt_suite()
    (p,) = s.prompts
    assert p.kind == "pp" and p.n_predict == LONG_PROMPT_N_PREDICT and p.is_chat
    assert p.messages[0]["content"].endswith(long_document())  # type: ignore[index]
    assert "Summarise this document" in p.messages[0]["content"]  # type: ignore[index]
    assert s.has_pp and not task_suite().has_pp


def test_full_suite_is_tasks_plus_long_prompt() -> None:
    names = [p.name for p in full_suite().prompts]
    assert names == list(TASK_NAMES) + ["long_document_summary"]


def test_get_suite_builtins_and_unknown_name() -> None:
    assert get_suite("tasks").name == "tasks"
    assert get_suite("long-prompt").name == "long-prompt"
    with pytest.raises(SuiteError, match=r"no-such-suite.*not a built-in suite.*tasks, long-prompt, full"):
        get_suite("no-such-suite")


def test_toml_user_suite(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "sql"\n'
        "[[prompts]]\n"
        'name = "query"\n'
        'prompt = "Write a SQL query that lists the ten newest orders."\n'
        "n_predict = 600\n"
        "[[prompts]]\n"
        'name = "chat"\n'
        'messages = [{role = "system", content = "Be brief."}, {role = "user", content = "Explain joins."}]\n'
        "[[prompts]]\n"
        'name = "raw_pp"\n'
        'raw = "Once upon a time"\n'
        'kind = "pp"\n'
    )
    s = get_suite(str(f))
    assert s.name == "sql" and s.source == str(f)
    q, c, r = s.prompts
    assert q.messages == ({"role": "user", "content": "Write a SQL query that lists the ten newest orders."},)
    assert q.n_predict == 600 and q.kind == "tg"
    assert [m["role"] for m in c.messages or ()] == ["system", "user"]
    assert r.raw == "Once upon a time" and r.messages is None and r.kind == "pp"


def test_jsonl_user_suite_skips_blanks_and_comments(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text('# my prompts\n{"name": "a", "prompt": "Hello there"}\n\n{"name": "b", "raw": "x", "kind": "pp"}\n')
    s = load_suite_file(f)
    assert s.name == "mine" and [p.name for p in s.prompts] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('[[prompts]]\nname = "a"\nprompt = "x"\n[[prompts]]\nname = "b"\n', r"bad\.toml, line 4: prompt 'b' needs exactly one of"),
        ('[[prompts]]\nname = "a"\nprompt = "x"\nkind = "speed"\n', r"bad\.toml, line 1: `kind` of 'a' is 'speed'"),
        ('[[prompts]]\nname = "a"\nprompt = "x"\n\n[[prompts]]\nname = "a"\nprompt = "y"\n', r"line 5: prompt name 'a' is used twice \(first at line 1\)"),
        ('[[prompts]]\nname = "a"\nprompt = "x"\nn_predict = -3\n', r"line 1: `n_predict` of 'a' must be a positive integer"),
        ('[[prompts]]\nname = "a"\nprompt = "x"\ncolour = 1\n', r"line 1: unknown key 'colour'"),
        ('title = "x"\n[[prompts]]\nname = "a"\nprompt = "x"\n', r"line 1: unknown top-level key 'title'"),
        ('[[prompts]]\nname = "a"\nprompt = "x\n', r"bad\.toml: invalid TOML: .*line 3"),
        ('name = "empty"\n', r"bad\.toml: no prompts"),
        ('[[prompts]]\nname = "a"\nmessages = [{role = "robot", content = "hi"}]\n', r"message 1 of 'a' must be"),
        ('[[prompts]]\nname = "a"\nmessages = [{role = "user", content = "hi"}, {role = "assistant", content = "yo"}]\n',
         r"last message of 'a' is from the assistant"),
    ],
)
def test_toml_errors_name_file_and_line(tmp_path: Path, text: str, pattern: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SuiteError, match=pattern):
        load_suite_file(f)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('{"name": "a", "prompt": "x"}\n\n{"name": "b", "prompt": }\n', r"bad\.jsonl, line 3: invalid JSON"),
        ('{"name": "a"}\n', r"bad\.jsonl, line 1: prompt 'a' needs exactly one of"),
        ('["a", "b"]\n', r"line 1: a prompt must be a table/object"),
        ('{"prompt": "no name"}\n', r"line 1: every prompt needs a `name`"),
        ("# only a comment\n", r"bad\.jsonl: no prompts"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, text: str, pattern: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(SuiteError, match=pattern):
        load_suite_file(f)


def test_unreadable_and_unknown_format(tmp_path: Path) -> None:
    f = tmp_path / "suite.yaml"
    f.write_text("a: b\n")
    with pytest.raises(SuiteError, match=r"suite\.yaml: unknown suite format \.yaml"):
        load_suite_file(f)
    g = tmp_path / "latin1.toml"
    g.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(SuiteError, match="not UTF-8"):
        load_suite_file(g)
