"""The measurement's own rules with a stand-in llama-perplexity (fast tier): one reference pass, one pass
per setting, everything again from the cache, a pass whose output llama.cpp's logger cut short run again
(and counted), and a pass that never ends stopped at its timeout with its process gone."""

from __future__ import annotations

import os
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.quality import cache
from tui.core.quality.measure import CUT_NOTE, QualityError, QualityRequest, measure
from tui.core.quality.models import model_id
from tui.core.quality.oracle import OracleInfo
from tui.core.quality.parse import parse_kld
from tui.core.quality.request import parse_kv_list
from tui.core.quality.text import corpus

CAPTURED = Path(__file__).resolve().parent / "data" / "quality" / "kld-q4_0-gemma3-270m.txt"

#: llama-perplexity's two modes as far as mtp-tune sees them: the reference writes a logits file of the
#: real layout and size; a setting prints the captured Gemma output (cut after its table on the calls
#: listed in $FAKE_CUT); $FAKE_SLEEP makes every pass hang.
FAKE = f"""#!{sys.executable}
import os, struct, sys, time
args = sys.argv[1:]
val = lambda f: args[args.index(f) + 1]
open(os.environ["FAKE_LOG"], "a").write(" ".join(args) + "\\n")
open(os.environ["FAKE_LOG"] + ".pid", "w").write(str(os.getpid()))
if os.environ.get("FAKE_SLEEP"):
    time.sleep(float(os.environ["FAKE_SLEEP"]))
if "--kl-divergence" in args:
    calls = sum(1 for ln in open(os.environ["FAKE_LOG"]) if "--kl-divergence" in ln.split())
    text = open({str(CAPTURED)!r}, encoding="utf-8").read()
    if str(calls) in os.environ.get("FAKE_CUT", "").split(","):
        text = text[: text.index("====== Perplexity")]
    sys.stdout.write(text)
else:
    ctx, chunks, vocab = int(val("-c")), int(val("--chunks")), int(os.environ["FAKE_VOCAB"])
    nv = 2 * ((vocab + 1) // 2) + 4
    with open(val("--kl-divergence-base"), "wb") as fh:
        fh.write(b"_logits_" + struct.pack("<Iii", ctx, vocab, chunks) + bytes(4 * ctx * chunks))
        fh.write(bytes(chunks * (ctx - 1 - ctx // 2) * nv * 2))
    print(f"perplexity: calculating perplexity over {{chunks}} chunks, n_ctx={{ctx}}, batch_size=2048, n_seq=4")
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[OracleInfo, Path, Path]:
    model = write_tiny_model(tmp_path / "tiny.gguf", PRESETS["tiny-mtp"])
    exe = tmp_path / "bin" / "llama-perplexity"
    exe.parent.mkdir()
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_VOCAB", str(model_id(model).n_vocab))
    options = frozenset({"-t", "--threads", "-c", "-fa", "--flash-attn", "--kl-divergence-base", "--kl-divergence"})
    return OracleInfo(exe, 11434, "fake", options), model, log


def _req(model: Path, kv: str, **kw: object) -> QualityRequest:
    return QualityRequest(model=model, server_args=("-m", str(model), "-t", "2", "--port", "9"),
                          kv=tuple(parse_kv_list(kv)), text=corpus(), ctx=512, chunks=2, **kw)  # type: ignore[arg-type]


def test_one_reference_one_pass_per_setting_then_the_cache(fake: tuple[OracleInfo, Path, Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    oracle, model, log = fake
    monkeypatch.setenv("FAKE_CUT", "1")  # the first setting's output loses its statistics once
    report = measure(_req(model, "f16,q4_0"), oracle)
    assert report.passes == {"reference": 1, "settings": 2, "repeated": 1}
    assert CUT_NOTE in report.notes and any("--port" in n for n in report.notes)
    printed = parse_kld(CAPTURED.read_text(encoding="utf-8").splitlines())
    assert [r.figures for r in report.results] == [printed, printed] and not any(r.cached for r in report.results)
    calls = log.read_text().splitlines()
    assert len(calls) == 4 and sum("--kl-divergence" in c.split() for c in calls) == 3
    base = calls[0]
    assert "-ctk f16 -ctv f16" in base and "--chunks 2" in base and "--port" not in base and "-t 2" in base
    assert "-ctk q4_0 -ctv q4_0" in calls[-1] and "--chunks" not in calls[-1]

    for folder in ("refs", "results", "locks"):  # model paths and the scored text live here: the user's only
        assert (cache.root() / folder).stat().st_mode & 0o077 == 0, folder

    again = measure(_req(model, "f16,q4_0"), oracle)
    assert again.passes == {"reference": 0, "settings": 0, "repeated": 0} and all(r.cached for r in again.results)
    assert len(log.read_text().splitlines()) == 4, "nothing ran"
    threads = measure(replace(_req(model, "q4_0"), server_args=("-m", str(model), "-t", "1")), oracle)
    assert threads.passes["settings"] == 0, "threads change no figure, so they are not part of the question"

    more = measure(_req(model, "q8_0/q4_0,q4_0"), oracle)
    assert more.passes == {"reference": 0, "settings": 1, "repeated": 0} and more.ref_cached
    assert [r.cached for r in more.results] == [False, True]


def test_output_cut_every_time_is_one_sentence(fake: tuple[OracleInfo, Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    oracle, model, _log = fake
    monkeypatch.setenv("FAKE_CUT", "1,2,3")
    with pytest.raises(QualityError, match=r"-ctk q8_0 -ctv q8_0: llama-perplexity printed no Mean KLD"):
        measure(_req(model, "q8_0"), oracle)


def test_a_pass_that_never_ends_is_stopped_and_its_process_is_gone(fake: tuple[OracleInfo, Path, Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    oracle, model, log = fake
    monkeypatch.setenv("FAKE_SLEEP", "120")
    started = time.monotonic()
    with pytest.raises(QualityError, match=r"llama-perplexity did not finish within 2 s \(raise --pass-timeout"):
        measure(_req(model, "q8_0", pass_timeout=2.0), oracle)
    assert time.monotonic() - started < 30
    pid = int(Path(str(log) + ".pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not list((cache.root() / "refs").glob("*.kld")), "no half reference is kept"
    assert not list((cache.root() / "refs").glob("*.tmp")), "nor its temporary files"
