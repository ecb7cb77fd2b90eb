"""`mtp-tune variants` over loopback: every quant of a Hub repo planned from its headers alone.

The repo is served by tests/helpers/range_server.py with the Hub's routes (refs, tree, resolve ->
302 -> blob with Range): five shape-only quants of Qwen3.6-35B-A3B (the real tensor tables, so the
real sizes and figures), a split set (a tiny model in three parts), an mmproj sidecar and a README.
The host RAM the planner sees is pinned (`fixed_host`), so verdicts do not move with this machine's
free memory. Each test has its own header cache (conftest's hermetic_env).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.quant_repo import REPO, fixed_host, quant_name, write_quants
from tests.helpers.range_server import LoopbackHub
from tests.helpers.split_model import split_gguf
from tui.cli import main
from tui.cli._common import check_server_args
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.planning.devices import devices_now
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.largest_ctx import CTX_STEP
from tui.core.planning.plan import plan
from tui.core.planning.resolve import KV_BPE
from tui.core.planning.weights import EXPERT_TENSORS
from tui.core.remote.variants import TIERS

GPUS = ["--gpus", "2x16GiB"]
KVS = ["f16", "q8_0", "q4_0"]
#: fit on (the default): the big quants load with experts moved to the host (pinned at 60 GiB free)
FIT_ON = ["-c", "32768", "--spec-type", "draft-mtp"]
#: fit off: every layer where the flags put it, so the Q8_0 (35 GiB) cannot fit two 16 GiB cards
FIT_OFF = ["-c", "32768", "--spec-type", "draft-mtp", "-fit", "off"]
SPLIT = [f"F16/Tiny-MoE-F16-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
#: every model of the repo by its (first) file: the five quants and the split set
MODELS = [quant_name(t) for t in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS")] + [SPLIT[0]]


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Repo path -> local file: five quants, a split set of three parts, an mmproj sidecar."""
    d = tmp_path_factory.mktemp("quants")
    files = write_quants(d)
    tiny = write_tiny_model(d / "tiny" / "Tiny-MoE-F16.gguf", PRESETS["tiny-moe-mtp"])
    parts = split_gguf(tiny, d / "split" / "Tiny-MoE-F16.gguf", 3)
    files.update({f"F16/{p.name}": p for p in parts})
    files["mmproj-F16.gguf"] = write_tiny_model(d / "mmproj" / "mmproj-F16.gguf", PRESETS["tiny-mtp"])
    return files


@pytest.fixture
def hub(hub: LoopbackHub, repo_files: dict[str, Path]) -> Iterator[LoopbackHub]:
    with fixed_host():
        hub.add_repo(REPO, repo_files, extra={"README.md": b"# quants\n"})
        yield hub


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def rows_json(capsys: pytest.CaptureFixture[str], *args: str, repo: str = REPO) -> list[dict[str, Any]]:
    rc, out, err = cli(capsys, "variants", repo, *GPUS, *args, "--json")
    assert rc == 0, err
    return json.loads(out)["rows"]  # type: ignore[no-any-return]


def test_one_row_per_quant_and_kv_a_split_set_is_one_row_and_no_sidecar(
        hub: LoopbackHub, repo_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rows = rows_json(capsys, "--kv", ",".join(KVS), *FIT_ON)
    assert sorted((r["file"], r["kv"]) for r in rows) == sorted((f, kv) for f in MODELS for kv in KVS)
    split = [r for r in rows if r["file"] == SPLIT[0]]
    assert all(r["files"] == SPLIT and r["tag"] == "F16" for r in split)
    assert split[0]["size"] == sum(repo_files[p].stat().st_size for p in SPLIT)
    q4 = next(r for r in rows if r["tag"] == "Q4_K_M")
    assert q4["size"] == repo_files[quant_name("Q4_K_M")].stat().st_size and q4["size"] > 19 * 2**30
    assert not any("mmproj" in f for r in rows for f in r["files"])
    assert not hub.hits(hub.oid(repo_files["mmproj-F16.gguf"]))  # the sidecar is never read
    assert all(r["kv_types"] == r["kv"] and r["ctx"] == 32768 and not r["error"] for r in rows)
    # ...but llama-server's -hf downloads it with every file (download.cpp find_best_sibling): named, not planned
    size = repo_files["mmproj-F16.gguf"].stat().st_size
    assert all(r["sidecars"] == [{"role": "mmproj", "path": "mmproj-F16.gguf", "size": size, "is_draft": False,
                                  "in_plan": False}] for r in rows)
    assert all(r["sidecars"] == [] for r in rows_json(capsys, "--no-mmproj", *FIT_ON))
    rc, out, _ = cli(capsys, "variants", REPO, *GPUS, *FIT_ON, "--md")
    assert rc in (0, 1) and "- with -hf: llama-server also downloads mmproj-F16.gguf" in out
    assert "not in this plan" in out and "--no-mmproj skips it" in out


@pytest.mark.parametrize("flags", [FIT_ON, FIT_OFF], ids=["fit-on", "fit-off"])
def test_sorted_by_tier_then_best_quant_then_wider_kv(hub: LoopbackHub, flags: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rows = rows_json(capsys, "--kv", "q4_0,f16,q8_0", *flags)  # asked narrow first: the sort reorders
    ranks = [TIERS.index(r["tier"]) for r in rows]
    assert ranks == sorted(ranks)  # yes, then with fit, then no
    for a, b in zip(rows, rows[1:]):
        if a["tier"] == b["tier"]:
            assert a["size"] >= b["size"]
            if a["file"] == b["file"]:
                assert KV_BPE[a["kv"]] > KV_BPE[b["kv"]]
    assert rows[0]["tier"] == "yes" and rows[0]["size"] == max(r["size"] for r in rows if r["tier"] == "yes")
    assert rows[0]["tag"] == "Q6_K"  # the best quant that fits as the flags put it, with fit on or off
    q8 = [r for r in rows if r["tag"] == "Q8_0"]
    if flags is FIT_OFF:  # 35 GiB on 2 x 16 GiB with every layer on the cards: no, and last
        assert [r["tier"] for r in q8] == ["no"] * 3 and not any(r["fits"] for r in q8) and rows[-1]["tag"] == "Q8_0"
        assert not any(r["tier"] == "with fit" for r in rows)  # fit off moves nothing
    else:  # it loads only because fit keeps its first experts in host memory: after every "yes" row
        assert [r["tier"] for r in q8] == ["with fit"] * 3 and all(r["fits"] for r in rows)
        assert rows[-3:] == q8
        assert all(r["fit_action"] == "move-layers" and "-ncmoe" in r["fit_choice"] for r in q8)


@pytest.mark.parametrize("flags", [FIT_ON, FIT_OFF], ids=["fit-on", "fit-off"])
def test_fits_and_max_ctx_agree_with_the_planner(hub: LoopbackHub, repo_files: dict[str, Path], flags: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """fits: no device of the row's plan runs out. max -c: the planner at max -c keeps every layer where
    the flags put it (fit on: fit changes nothing; fit off: no OOM) and one block more does not."""
    rows = rows_json(capsys, "--kv", "f16,q4_0", *flags)
    ds = devices_now("2x16GiB")
    devs, ht, hf = list(ds.devices), ds.host_total_mib, ds.host_free_mib
    fit_on = "-fit" not in flags
    for r in rows:
        assert r["fits"] == all(d["risk"] != "oom" for d in r["devices"]) == (r["tier"] in ("yes", "with fit")), r
        assert (r["tier"] == "with fit") == (r["fits"] and bool(r["fit_choice"])), r
        assert r["tight"] == (r["tier"] == "yes" and any(d["risk"] == "tight" for d in r["devices"])), r
        assert r["max_ctx_limit"] == (4096 if r["file"] == SPLIT[0] else 262144)  # n_ctx_train
        meta = read_gguf(repo_files[r["file"]])
        s = check_server_args([*flags, "-ctk", r["kv"], "-ctv", r["kv"], "-m", str(repo_files[r["file"]])], warn=False)

        def loads(ctx: int) -> bool:
            p = plan(meta, replace(s, ctx_size=ctx), devs, ht, hf)
            return p.fit.action == "none" if fit_on else p.worst_risk != "oom"

        m = r["max_ctx"]
        if fit_on:  # "yes" is exactly "fit moves nothing at the row's -c": max -c reaches it (or the model's limit)
            reached = m is not None and m >= min(r["ctx"], r["max_ctx_limit"])
            assert (r["tier"] == "yes") == loads(r["ctx"]) == reached, r
        if m is None:
            assert not loads(CTX_STEP), r
            continue
        assert m % CTX_STEP == 0 and loads(m), r
        if m < r["max_ctx_limit"]:
            assert not loads(m + CTX_STEP), r
    seen = {r["tag"]: r["max_ctx"] for r in rows if r["kv"] == "f16"}
    assert seen["Q8_0"] is None and seen["IQ4_XS"] == 262144  # both ends of the table are reached
    assert any(m is not None and 32768 < m < 262144 for m in seen.values())  # and a bound in between


def test_max_ctx_does_not_depend_on_the_flags_c(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    def by_row(*flags: str) -> dict[tuple[str, str], tuple[int | None, int]]:
        return {(r["file"], r["kv"]): (r["max_ctx"], r["ctx"]) for r in rows_json(capsys, "--kv", "f16,q4_0", *flags)}

    small, large = by_row("-c", "8192", "-fit", "off"), by_row("-c", "100000", "-fit", "off")
    assert {k: v[0] for k, v in small.items()} == {k: v[0] for k, v in large.items()}
    assert {v[1] for v in small.values()} == {8192} and {v[1] for v in large.values()} == {100096}  # padded to 256


@pytest.mark.parametrize("flags", [FIT_ON, ["--spec-type", "draft-mtp", "-np", "1"]], ids=["c-given", "c-unset"])
def test_every_rows_devices_equal_plan_of_that_file(hub: LoopbackHub, repo_files: dict[str, Path], flags: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rows = rows_json(capsys, "--kv", "f16,q4_0", *flags)
    assert any(r["fit_action"] == "reduce-ctx" or "-c" in r["fit_choice"] for r in rows) == ("-c" not in flags)
    for r in rows:
        rc, out, err = cli(capsys, "plan", "-m", str(repo_files[r["file"]]), *GPUS, *flags,
                           "-ctk", r["kv"], "-ctv", r["kv"], "--json")
        assert rc == 0, err
        p = json.loads(out)
        assert [d["key"] for d in r["devices"]] == [d["name"].split()[0] for d in p["devices"]]
        assert [d["needed_mib"] for d in r["devices"]] == [d["needed_mib"] for d in p["devices"]], r["file"]
        assert [d["headroom_mib"] for d in r["devices"]] == [d["headroom_mib"] for d in p["devices"]]
        assert r["fit_action"] == p["model"]["fit"]["action"] and r["ctx"] == p["model"]["context"]["n_ctx"]


def test_mapped_part_of_the_host_need_is_the_file_between_its_tensors(hub: LoopbackHub, repo_files: dict[str, Path],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With mmap the host's weights are the file range its tensors span (llama.cpp's CPU_Mapped buffer);
    `mapped_mib` is what of that range is other devices' tensors: the span minus the host's own bytes."""
    rows = rows_json(capsys, "--kv", "f16", *FIT_ON, repo=f"{REPO}:Q8_0")
    (row,) = rows
    n = int(row["fit_choice"][row["fit_choice"].index("-ncmoe") + 1])
    meta = read_gguf(repo_files[row["file"]])
    own = [t for t in meta.tensors if t.name.startswith("token_embd")
           or (t.layer is not None and t.layer < n and EXPERT_TENSORS.search(t.name))]
    span = max(t.offset + t.nbytes for t in own) - min(t.offset for t in own)
    host = row["devices"][-1]
    assert host["key"] == "Host" and host["mapped_mib"] == pytest.approx((span - sum(t.nbytes for t in own)) / 2**20, abs=0.1)
    assert 0 < host["mapped_mib"] < host["needed_mib"] / 4  # the experts lie together: a little in between
    assert all("mapped_mib" not in d for d in row["devices"][:-1])
    no_mmap = rows_json(capsys, "--kv", "f16", *FIT_ON, "--load-mode", "none", repo=f"{REPO}:Q8_0")[0]
    assert no_mmap["devices"][-1]["mapped_mib"] == 0  # read into RAM: only the host's own tensors
    locked = rows_json(capsys, "--kv", "f16", *FIT_ON, "--load-mode", "mmap+mlock", repo=f"{REPO}:Q8_0")[0]
    assert locked["devices"][-1]["mapped_mib"] == 0  # mlock holds the whole mapped range in RAM: all of it is need
    assert locked["devices"][-1]["needed_mib"] == host["needed_mib"]


def test_only_headers_are_read_and_a_second_run_asks_nothing(hub: LoopbackHub, repo_files: dict[str, Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, "variants", REPO, *GPUS, "--kv", "f16,q4_0", *FIT_ON, "--json")
    assert rc == 0, err
    rows = json.loads(out)["rows"]
    for path in MODELS:
        row = next(r for r in rows if r["file"] == path)
        parts = SPLIT if path == SPLIT[0] else [path]
        hits = [h for p in parts for h in hub.hits("/blobs/" + hub.oid(repo_files[p]))]
        assert hits and all(h.status == 206 and h.range.startswith("bytes=") for h in hits)
        sent = sum(h.sent for h in hits)
        header = row["header_bytes"]
        assert header <= sent <= max(header * 1.15, header + len(parts) * (384 << 10)), (path, header, sent)
        assert sent < sum(repo_files[p].stat().st_size for p in parts) / 2
    big = sum(h.sent for h in hub.hits("/blobs/" + hub.oid(repo_files[quant_name("Q8_0")])))
    assert big < 16 << 20  # ~12 MB of header for a 35 GiB file
    hub.clear()
    rc, out, err = cli(capsys, "variants", REPO, *GPUS, "--kv", "f16,q4_0", *FIT_ON, "--json")
    assert rc == 0 and hub.log == [] and json.loads(out)["requests"] == 0
    assert json.loads(out)["rows"] == rows  # the same table from the cache
    rc, _, _ = cli(capsys, "variants", REPO, *GPUS, *FIT_ON, "--refresh", "--json")
    assert rc == 0 and hub.log and all(h.path.startswith("/api/models/") for h in hub.log)  # a commit's headers never change


def test_a_quant_tag_keeps_only_that_quants_files(hub: LoopbackHub, repo_files: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rows = rows_json(capsys, "--kv", "f16,q8_0", *FIT_ON, repo=f"{REPO}:q4_k_m")  # case-insensitive, as -hf
    assert [(r["file"], r["kv"]) for r in rows] == [(quant_name("Q4_K_M"), "f16"), (quant_name("Q4_K_M"), "q8_0")]
    blobs = {h.path for h in hub.log if h.path.startswith("/blobs/")}
    assert blobs == {"/blobs/" + hub.oid(repo_files[quant_name("Q4_K_M")])}
    split = rows_json(capsys, *FIT_ON, repo=f"{REPO}:F16")
    assert [r["files"] for r in split] == [SPLIT]
    hub.clear()
    rc, out, err = cli(capsys, "variants", f"{REPO}:Q4_K", *GPUS)  # as -hf: Q4_K is not Q4_K_M
    assert rc == 2 and out == "" and "no GGUF model file matching 'Q4_K'" in err
    assert not any(h.path.startswith("/blobs/") for h in hub.log)


@pytest.mark.parametrize("args, says", [
    (["--kv", "q3_0"], "unknown cache type 'q3_0'"),
    (["--kv", "f16,q4_0", "-fa", "off"], "needs flash attention"),
    (["-c", "abc"], "ctx-size"),
    (["--gpus", "3xbanana"], "3xbanana"),
    (["-ts", "1,1,1"], "tensor"),
], ids=["kv-type", "kv-needs-fa", "bad-c", "bad-gpus", "ts-too-long"])
def test_a_refused_flag_or_kv_type_stops_before_any_request(hub: LoopbackHub, args: list[str], says: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    gpus = [] if "--gpus" in args else GPUS
    rc, out, err = cli(capsys, "variants", REPO, *gpus, *args)
    assert rc == 2 and out == "" and says in err and "Traceback" not in err, err
    assert hub.log == []
    rc, _, err = cli(capsys, "variants", "no-slash-repo", *GPUS)
    assert rc == 2 and "expected <user>/<model>" in err and hub.log == []


def test_exit_status(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, "variants", REPO, *GPUS, *FIT_OFF)
    assert rc == 0 and "mtp-tune: listing" in err and "reading the header" in err  # progress on stderr only
    rc, out, _ = cli(capsys, "variants", f"{REPO}:Q8_0", *GPUS, *FIT_OFF)  # nothing fits
    assert rc == 1 and " no " in out and " yes " not in out
    rc, out, _ = cli(capsys, "variants", f"{REPO}:Q8_0", *GPUS, *FIT_OFF, "--json")
    assert rc == 0 and not any(r["fits"] for r in json.loads(out)["rows"])  # --json: 0, as plan --json
    rc, out, err = cli(capsys, "variants", "nobody/nothing-GGUF", *GPUS)
    assert rc == 2 and out == "" and "nobody/nothing-GGUF was not found" in err and "Traceback" not in err


def test_exact_without_a_server_says_why_and_keeps_the_estimate(hub: LoopbackHub, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MTP_TUNE_LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    rows = rows_json(capsys, *FIT_ON, "--exact", repo=f"{REPO}:IQ4_XS")
    assert len(rows) == 1 and rows[0]["source"] == "estimate" and rows[0]["fits"]
    assert "no-such-llama-server" in rows[0]["exact_reason"]
