"""What `mtp-tune variants` prints (--md, the plain table, the legend) and the pieces it is built from.

A smaller loopback repo than tests/test_variants.py: two shape-only quants (the largest and the
smallest), a split set, and for the error case a file that is no GGUF.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.quant_repo import REPO, fixed_host, write_quants
from tests.helpers.range_server import LoopbackHub
from tests.test_quality_index import measured
from tests.helpers.split_model import split_gguf
from tui.cli import main
from tui.cli._variants_table import fits_cell, gib, short_flags
from tui.cli.variants import _settings_for, kv_list
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.planning.devices import devices_now
from tui.core.quality import index
from tui.core.quality.request import KvSpecError
from tui.core.planning.result import FitOutcome
from tui.core.remote.fetch import repo_listing
from tui.core.remote.hub import HubFile, Variant
from tui.core.remote.variants import VariantRow, matches_tag, plan_variants, sort_rows

FLAGS = ["--gpus", "2x16GiB", "--kv", "f16,q4_0", "-c", "32768", "--spec-type", "draft-mtp"]
CELL = re.compile(r"^\d+(\.\d+)? \([+-]\d+(\.\d+)?(; \d+(\.\d+)? mapped)?\)$")  # need (left[; mapped]), GiB


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("quants2")
    files = write_quants(d, ["Q8_0", "IQ4_XS"])
    tiny = write_tiny_model(d / "tiny" / "Tiny-MoE-F16.gguf", PRESETS["tiny-moe-mtp"])
    files.update({f"F16/{p.name}": p for p in split_gguf(tiny, d / "split" / "Tiny-MoE-F16.gguf", 3)})
    broken = d / "Broken-Q2_K.gguf"
    broken.write_bytes(b"<html>not a model</html>" + b"\0" * 4096)
    files["Broken-Q2_K.gguf"] = broken
    return files


@pytest.fixture
def hub(hub: LoopbackHub, repo_files: dict[str, Path]) -> Iterator[LoopbackHub]:
    with fixed_host():
        hub.add_repo(REPO, repo_files)
        yield hub


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["variants", REPO, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def md_table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines]
    assert split[1] == ["---"] * len(split[0])
    return split[0], split[2:]


def test_markdown_table_legend_and_json_say_the_same(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *FLAGS, "-fit", "off", "--md")
    assert rc == 0 and err == ""  # no progress lines in --md
    head, rows = md_table(out)
    assert head == ["quant", "file", "GiB", "KV", "KV KLD", "at -c", "CUDA0 need (left)", "CUDA1 need (left)",
                    "Host need (left)", "fits", "max -c", "fit would"]
    rc, js, _ = run(capsys, *FLAGS, "-fit", "off", "--json")
    data: list[dict[str, Any]] = json.loads(js)["rows"]
    assert len(rows) == len(data) == 8 and all(len(r) == len(head) for r in rows)
    for cells, r in zip(rows, data):
        assert cells[1].startswith(r["file"].rsplit("/", 1)[-1]) and cells[3] == r["kv"]
        assert cells[4] == ("reference" if r["kv"] == "f16" else "") and r["quality"] == (  # nothing measured
            "reference" if r["kv"] == "f16" else None)
        if r["error"]:
            assert cells[9] == "error" and "GGUF" in cells[11]
            continue
        assert cells[2] == gib(r["size"] / 2**20) and cells[5] == str(r["ctx"])
        assert all(CELL.match(c) for c in cells[6:9]), cells
        assert cells[9] == r["tier"] + (" (tight)" if r["tight"] else "") and r["tier"] in ("yes", "no")  # fit off
        assert cells[10] == ("none" if r["max_ctx"] is None else
                            f"{r['max_ctx']} (max)" if r["max_ctx"] == r["max_ctx_limit"] else str(r["max_ctx"]))
    by_tag = {c[0] + c[3]: c for c in rows}
    assert by_tag["Q8_0f16"][2] == "35.2" and by_tag["Q8_0f16"][9] == "no" and by_tag["Q8_0f16"][10] == "none"
    assert by_tag["IQ4_XSq4_0"][10] == "262144 (max)" and by_tag["F16f16"][1].endswith("+2 parts")
    assert [c[9] for c in rows][-2:] == ["error", "error"]  # the unreadable file last, named
    assert out.splitlines()[0].startswith(f"**{REPO} @ 0123456789 on 2x16GiB")
    legend = [ln for ln in out.splitlines() if ln.startswith("- ")]
    assert any("max -c" in ln and "training context (262144)" in ln for ln in legend)
    assert any(ln.startswith("- need (left)") for ln in legend) and any(ln.startswith("- fit would") for ln in legend)
    assert any(ln.startswith("- fits: yes: loads as the flags put it") and "with fit: loads only because" in ln
               for ln in legend)


def test_plain_table_shows_fit_would_and_progress(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *FLAGS)
    assert rc == 0 and f"listing {REPO}" in err and "reading the header of Qwen3.6-35B-A3B-Q8_0.gguf" in err
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("quant"))
    q8 = [ln for ln in lines[head:] if ln.startswith("Q8_0")]
    assert len(q8) == 2 and all(re.search(r"\(\+\d+\.\d; \d+\.\d mapped\)\s+with fit\s+none\s+-ncmoe \d+$", ln)
                                for ln in q8), q8
    # the Q8_0 loads only because fit keeps experts on the host: after every row that fits as given
    assert lines[head + 1].startswith("IQ4_XS") and re.search(r"\s+yes\s+262144 \(max\)$", lines[head + 1])
    assert [ln.split()[0] for ln in lines[head + 1:head + 9]] == ["IQ4_XS"] * 2 + ["F16"] * 2 + ["Q8_0"] * 2 + ["Q2_K"] * 2
    assert any(ln.startswith("need (left): ") and "N mapped" in ln for ln in lines)
    assert "flags: -c 32768 --spec-type draft-mtp" in lines[0] and "host 60.0 GiB free" in lines[0]
    assert any(ln.startswith("max -c: ") for ln in lines) and any(ln.startswith("fit would: ") for ln in lines)


def test_the_kv_kld_column_is_what_was_measured_on_that_file(hub: LoopbackHub, repo_files: dict[str, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the header digest: the Hub file's header copy is the file measured on disk (the same
    digest), for its K/V setting only; the other rows stay blank."""
    iq4 = next(p for name, p in repo_files.items() if "IQ4_XS" in name)
    m = measured(iq4, "q8_0/q4_0", 0.0123)
    index.record(m)
    rc, out, _ = run(capsys, "--gpus", "2x16GiB", "--kv", "f16,q8_0/q4_0,q4_0", "-c", "32768", "--md")
    head, rows = md_table(out)
    kld = {(c[0], c[3]): c[head.index("KV KLD")] for c in rows}
    assert kld[("IQ4_XS", "q8_0/q4_0")] == f"0.0123 · {m.figures.same_top_pct.value:.1f} %"
    assert kld[("IQ4_XS", "q4_0")] == kld[("Q8_0", "q8_0/q4_0")] == ""  # another setting, another file: blank
    assert kld[("IQ4_XS", "f16")] == "reference"
    assert any(ln.startswith("- KV KLD: ") and "nothing is guessed" in ln for ln in out.splitlines())
    rc, js, _ = run(capsys, "--gpus", "2x16GiB", "--kv", "q8_0/q4_0", "-c", "32768", "--json")
    got = {r["tag"]: r["quality"] for r in json.loads(js)["rows"]}
    assert got["IQ4_XS"]["kld_mean"] == 0.0123 and got["IQ4_XS"]["ctx"] == m.ctx and got["Q8_0"] is None


def test_the_command_as_installed(hub: LoopbackHub) -> None:
    """The real entry point in a child process (this machine's host RAM: the verdicts are not asserted)."""
    env = {**os.environ, "HF_ENDPOINT": hub.url}
    r = subprocess.run([sys.executable, "-m", "tui.cli", "variants", f"{REPO}:IQ4_XS", *FLAGS, "--md"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    head, rows = md_table(r.stdout)
    assert [c[0] + c[3] for c in rows] == ["IQ4_XSf16", "IQ4_XSq4_0"] and head[-1] == "fit would"


def _row(size: int, kv: str | None, tier: str, error: str = "") -> VariantRow:
    """A row whose plan says only what the tier needs: the worst risk and fit's outcome ("with fit":
    an exact row whose fit choice changed something)."""
    class _P:
        worst_risk = {"no": "oom", "tight": "tight"}.get(tier, "ok")
        fit = FitOutcome(True, "none", "")
        layer_device: list[str] = []

        def device(self, key: str) -> None:
            return None

    class _Fit:
        changed, action, message = True, "move-layers", ""

        def flags(self) -> list[str]:
            return ["-ncmoe", "3"]

    class _Exact:
        available, plan, fit, reason = True, _P(), _Fit(), ""

    row = VariantRow(Variant("Q", (HubFile(f"m-{size}.gguf", size),)), kv, error=error)
    row.plan = _P()  # type: ignore[assignment]
    if tier == "with fit":
        row.exact = _Exact()
    return row


def test_sort_rows_by_tier_then_size_then_kv_width_errors_last() -> None:
    rows = [_row(10, "q4_0", "yes"), _row(30, "f16", "no"), _row(20, "q8_0", "yes"), _row(20, "f16", "tight"),
            _row(40, "f16", "yes", error="not a GGUF"), _row(20, "q4_1", "yes"), _row(20, "iq4_nl", "yes"),
            _row(50, "q4_0", "with fit"), _row(50, "f16", "with fit"), _row(60, "f16", "no")]
    got = [(r.variant.size, r.kv, r.tier, r.tight, r.fits) for r in sort_rows(rows)]
    assert got == [(20, "f16", "yes", True, True), (20, "q8_0", "yes", False, True), (20, "q4_1", "yes", False, True),
                   (20, "iq4_nl", "yes", False, True), (10, "q4_0", "yes", False, True),
                   (50, "f16", "with fit", False, True), (50, "q4_0", "with fit", False, True),
                   (60, "f16", "no", False, False), (30, "f16", "no", False, False),
                   (40, "f16", "error", False, False)]
    assert [fits_cell(r) for r in sort_rows(rows)][:6] == ["yes (tight)", "yes", "yes", "yes", "yes", "with fit (exact)"]
    assert rows[7].fit_choice == "-ncmoe 3" and rows[7].mapped_mib == 0.0  # no host in this plan


def test_the_picker_shows_the_tier(hub: LoopbackHub) -> None:
    """The TUI picker's rows (tui.ui.variants.views.view_of) carry the tier and show it in the fits column."""
    from tui.ui.variants.views import view_of

    ds = devices_now("2x16GiB")
    settings_for = _settings_for(["-c", "32768", "--spec-type", "draft-mtp"], ds.count)
    table = plan_variants(REPO, settings_for, ds, ["f16"])
    _, files, _ = repo_listing(REPO, None)
    view = view_of(table, files, "f16 (form)")
    at = list(view.columns).index("fits")
    assert [(line.tag, line.tier, line.cells[at]) for line in view.rows] == [
        ("IQ4_XS", "yes", "yes"), ("F16", "yes", "yes"), ("Q8_0", "with fit", "with fit"), ("Q2_K", "error", "error")]
    assert view.best == 0 and all(line.fits == (line.tier in ("yes", "with fit")) for line in view.rows)


def test_tag_matching_is_llama_cpps() -> None:
    def v(path: str, tag: str) -> Variant:
        return Variant(tag, (HubFile(path, 1),))

    assert matches_tag(v("M-Q4_K_M.gguf", "Q4_K_M"), "q4_k_m")
    assert matches_tag(v("Q8_0/M-Q8_0-00001-of-00002.gguf", "Q8_0"), "Q8_0")
    assert matches_tag(v("M-UD-Q4_K_XL.gguf", "Q4_K_XL"), "UD-Q4_K_XL")
    assert not matches_tag(v("M-Q4_K_M.gguf", "Q4_K_M"), "Q4_K")
    assert matches_tag(v("M-IQ4_XS.gguf", "IQ4_XS"), "Q4_XS")  # as -hf's find_best_model: a search, not a word
    assert not matches_tag(v("M-Q4_0.gguf", "Q4_0"), "Q4_K_M")


def test_small_pieces() -> None:
    assert kv_list("f16, q8_0,,f16") == ["f16", "q8_0"] and kv_list("") == [None]
    assert kv_list("q8_0/q8_0,q8_0/q4_0") == ["q8_0", "q8_0/q4_0"]  # quality's one K/V list reader
    with pytest.raises(KvSpecError, match="q8_0/"):
        kv_list("q8_0/")
    s = _settings_for(["-c", "512"], None)("model.gguf", "q8_0/q4_0")
    assert (s.cache_type_k, s.cache_type_v) == ("q8_0", "q4_0")
    assert short_flags(["-c", "4096", "-ngl", "6", "-ts", "6,0", "-ot", "a=CPU,b=CPU"]) == "-c 4096 -ngl 6 -ts 6,0 -ot (2 overrides)"
    assert short_flags(["-ot", "blk\\.3\\.ffn_up_exps=CUDA0"]) == "-ot (1 override)"
    assert (gib(2.7), gib(0), gib(36044.8), gib(None)) == ("0.0026", "0.0", "35.2", "-")
