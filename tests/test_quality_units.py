"""`mtp-tune quality`'s pieces without a binary: K/V pairs, the flags llama-perplexity gets, the budget,
the caches' pruning, the text, the reference check, and the CLI's refusals (before any build)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui.core.quality import budget, cache
from tui.core.quality.models import ModelError, check_reference, model_id
from tui.core.quality.request import KvPair, KvSpecError, parse_kv_list, perplexity_args
from tui.core.quality.text import TextError, corpus, load_text, with_fallback
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from dataclasses import replace


def test_kv_pairs_are_k_and_v_apart_each_once_in_order() -> None:
    assert parse_kv_list("f16, q8_0,q8_0/q4_0,q8_0,q8_0/q8_0") == [
        KvPair("f16", "f16"), KvPair("q8_0", "q8_0"), KvPair("q8_0", "q4_0")]
    assert [p.label for p in parse_kv_list("q8_0/q4_0,q5_0")] == ["q8_0/q4_0", "q5_0"]
    assert KvPair("q8_0", "q4_0").args == ["-ctk", "q8_0", "-ctv", "q4_0"]
    assert parse_kv_list("") == []
    for bad in ("q8_0/q4_0/f16", "/q4_0", "q8_0/"):
        with pytest.raises(KvSpecError, match="--kv"):
            parse_kv_list(bad)


def test_the_server_flags_become_llama_perplexitys_and_the_rest_is_named() -> None:
    accepted = frozenset({"-t", "--threads", "-fa", "--flash-attn", "-ngl", "--n-gpu-layers", "-c", "--ctx-size",
                          "-ctk", "-ctv", "-m", "--hf-token", "-hft"})
    args = ["-m", "x.gguf", "-c", "4096", "-ctk", "q8_0", "-ctv", "q4_0", "-t", "2", "-fa", "on", "--port", "8080",
            "--spec-type", "draft-mtp", "-ngl", "99", "--api-key", "sekrit", "-hft", "hf_secret"]
    got = perplexity_args(args, accepted)
    assert got.args == ("-t", "2", "-fa", "on", "-ngl", "99")
    assert got.dropped == ("--port", "--spec-type")
    assert got.key_args == ["-fa", "on", "-ngl", "99"], "threads change no figure, so no cache key"
    assert "sekrit" not in repr(got) and "hf_secret" not in repr(got)


def test_the_reference_size_is_llama_perplexitys_file_size() -> None:
    # 6 chunks of 512 on Gemma 3's 262144-token vocabulary: the 802 MB the issue measured
    assert budget.ref_bytes(262144, 512, 6) == 802_185_188
    assert budget.ref_bytes(262144, 512, 2) - budget.ref_bytes(262144, 512, 1) == 255 * (262144 + 4) * 2 + 4 * 512


def test_the_budget_lowers_chunks_and_context_and_says_why() -> None:
    gib = 2**30
    plan = budget.choose(n_vocab=262144, tokens=13000, cap_bytes=2 * gib, ctx=512, chunks=20)
    assert plan.chunks == 16 and plan.ref_bytes <= 2 * gib and "disk cap" in plan.notes[0]
    plan = budget.choose(n_vocab=262144, tokens=13000, cap_bytes=2 * gib, ctx=8192)
    assert plan.ctx == 4096 and "two contexts" in plan.notes[0]
    plan = budget.choose(n_vocab=262144, tokens=10**6, cap_bytes=2 * gib, ctx=65536)
    assert plan.ctx == 4096 and plan.ref_bytes <= 2 * gib and any("more than the" in n for n in plan.notes)
    plan = budget.choose(n_vocab=1000, tokens=3000, cap_bytes=2 * gib)
    assert plan.ctx == 1024 and plan.chunks == 2 and "longest context" in plan.notes[0]
    assert budget.choose(n_vocab=262144, tokens=13000, cap_bytes=2 * gib, ctx=512).notes == ()
    with pytest.raises(budget.BudgetError, match="two contexts of 256"):
        budget.choose(n_vocab=1000, tokens=300, cap_bytes=gib)
    with pytest.raises(budget.BudgetError, match="--disk-cap"):
        budget.choose(n_vocab=262144, tokens=13000, cap_bytes=10**6, ctx=512)


def test_references_are_pruned_oldest_first_to_the_cap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "q"))
    refs = tmp_path / "q" / "refs"
    refs.mkdir(parents=True)
    now = time.time()
    for i, name in enumerate(("old", "mid", "new")):
        (refs / f"{name}.kld").write_bytes(b"x" * 100)
        (refs / f"{name}.json").write_text("{}")
        os.utime(refs / f"{name}.kld", (now - 100 + i, now - 100 + i))
    (refs / "dead.1.tmp").write_bytes(b"half")  # a pass that died: nobody holds its lock
    (refs / "live.2.tmp").write_bytes(b"being written")
    with cache.locked("live"):
        assert subprocess.run([sys.executable, "-c", "from tui.core.quality import cache; "
                               "print(sorted(p.name for p in cache.prune_refs(250, keep={'old'})))"],
                              capture_output=True, text=True, timeout=60).stdout.strip() == "['dead.1.tmp', 'mid.kld']"
    assert (refs / "live.2.tmp").exists(), "another mtp-tune's reference being written is left alone"
    (refs / "live.2.tmp").unlink()
    assert sorted(p.name for p in refs.iterdir()) == ["new.json", "new.kld", "old.json", "old.kld"]
    assert cache.cached_ref("new") == refs / "new.kld" and cache.cached_ref("mid") is None
    assert cache.prune_refs(0, room_for=0, keep={"new"}) == [refs / "old.kld"]


def test_results_are_cached_by_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "q"))
    k = cache.key("result", "ref", "model", "q8_0", "q4_0")
    assert k != cache.key("result", "ref", "model", "q4_0", "q8_0")
    assert cache.read_result(k) is None
    cache.write_result(k, {"figures": {"kld_mean": 0.5}})
    assert cache.read_result(k) == {"figures": {"kld_mean": 0.5}}


def test_the_text_is_the_workload_a_file_or_the_corpus(tmp_path: Path) -> None:
    default = load_text()
    assert "probe workload" in default.label and default.n_bytes > 40_000
    tasks = load_text(workload="tasks")
    assert tasks.label == "--workload tasks" and tasks.n_bytes < default.n_bytes
    f = tmp_path / "t.txt"
    f.write_text("hello " * 10)
    assert load_text(str(f)).text == "hello " * 10
    with pytest.raises(TextError, match=r"--text .*nope.txt: cannot be read"):
        load_text(str(tmp_path / "nope.txt"))
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(TextError, match="not UTF-8"):
        load_text(str(tmp_path / "bin.txt"))
    with pytest.raises(TextError, match="--workload nope: not a built-in suite"):
        load_text(workload="nope")
    short = load_text(str(f))
    swapped = with_fallback(short, 15, 512)
    assert swapped.text == corpus().text and "15 tokens" in swapped.note
    assert with_fallback(default, 10_000, 512) is default


def test_a_reference_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    a = model_id(write_tiny_model(tmp_path / "a.gguf", PRESETS["tiny-mtp"]))
    b = model_id(write_tiny_model(tmp_path / "b.gguf", replace(PRESETS["tiny-mtp"], n_merges=50)))
    check_reference(a, model_id(write_tiny_model(tmp_path / "c.gguf", PRESETS["tiny-mtp-q8_0"])))
    with pytest.raises(ModelError, match=r"--ref .*b.gguf: its tokenizer .* is not that of a.gguf") as e:
        check_reference(a, b)
    assert str(e.value).count(".") <= 4 and "\n" not in str(e.value)
    with pytest.raises(ModelError, match="-m .*missing.gguf: no such file"):
        model_id(tmp_path / "missing.gguf")


def _quality(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui.cli", "quality", *args], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))


def test_the_cli_refuses_bad_input_in_one_sentence_before_any_build(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "a.gguf", PRESETS["tiny-mtp"])
    other = write_tiny_model(tmp_path / "b.gguf", replace(PRESETS["tiny-mtp"], n_merges=50))
    cases = {
        (): "quality needs a model file",
        ("-hf", "org/repo:Q4_K_M"): "model file on disk",
        ("-m", str(model), "--kv", "q8_0/q9"): "cache-type-v: unknown cache type 'q9'",
        ("-m", str(model), "--kv", "q8_0/q4_0/f16"): "--kv 'q8_0/q4_0/f16'",
        ("-m", str(model), "--ctk", "q8_0"): "--ctk",
        ("-m", str(model), "--ref", str(other)): "its tokenizer",
        ("-m", str(tmp_path / "none.gguf")): "none.gguf: no such file",
        ("-m", str(model), "--disk-cap", "0"): "--disk-cap 0",
        ("-m", str(model), "--text", str(tmp_path / "t.txt")): "t.txt: cannot be read",
    }
    for args, words in cases.items():
        out = _quality(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert words in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and "build" not in out.stderr.lower(), (args, out.stderr)
