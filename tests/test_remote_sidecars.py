"""`-hf REPO[:QUANT]` downloads more than the model: the projector (`mmproj`) and, per `--spec-type`,
a draft sidecar (`mtp-`, `eagle3-`, `dflash-`, `dspark-`). mtp-tune names them as llama-server picks them.

The pure cases are read from llama.cpp b11434: common/download.cpp `find_best_sibling` (:534-600:
the sibling's folder must be the model's or above it, the deepest wins, then an exact `-TAG.` match,
then the closest quant bits), `extract_quant_bits` (:502), `common_download_get_hf_plan` (:746-760:
the projector by the model's bits, the draft kinds by the tag) and common/arg.cpp
`common_models_handler_init` (:394-401, which `download_*` are on) and `common_models_handler_apply`
(:620-680: the first draft sidecar becomes the draft unless `-md`; `--spec-draft-hf` replaces them).
The CLI runs against the loopback Hub (tests/helpers/range_server.py); the real llama-server, too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import server_env
from tests.helpers.range_server import LoopbackHub, serve
from tests.helpers.remote_cli import one_error, plan_cli, plan_json
from tests.helpers.supervisor_util import settings_of
from tui.core.remote.hub import (HubFile, SidecarOptions, extract_quant_bits, find_best_sibling, resolve_files,
                                 sidecar_options, sidecars)

FLAGS = ("--gpus", "2x16GiB", "-c", "4096")
GiB = 2**30


def _files(*paths: str) -> list[HubFile]:
    return [HubFile(p, i + 1) for i, p in enumerate(paths)]


def _best(files: list[HubFile], model: str, keyword: str, tag: str = "") -> str | None:
    hit = find_best_sibling(files, model, keyword, tag)
    return hit.path if hit else None


# ---- the pure rules ----

@pytest.mark.parametrize("path,bits", [
    ("m-Q4_0.gguf", 4), ("m-F16.gguf", 16), ("mmproj-BF16.gguf", 16), ("m-NVFP4.gguf", 4), ("m-Q8_K_M.gguf", 8),
    ("m-IQ3_XXS.gguf", 3), ("model.gguf", 0), ("m-Q4_K_M.bin", 0), ("Q4/m-Q5_K_S-00001-of-00003.gguf", 5),
])
def test_extract_quant_bits(path: str, bits: int) -> None:
    assert extract_quant_bits(path) == bits  # download.cpp:502, the tag of get_gguf_split_info's prefix


def test_the_projector_closest_to_the_model_s_bits_wins() -> None:
    # find_best_sibling (download.cpp:534) with no tag (find_best_mmproj, :586): the model's bits
    files = _files("m-Q4_K_M.gguf", "m-F16.gguf", "mmproj-BF16.gguf", "mmproj-F16.gguf", "mmproj-F32.gguf")
    assert _best(files, "m-Q4_K_M.gguf", "mmproj") == "mmproj-BF16.gguf"  # 12 bits off, as F16: the listing's first
    assert _best(files, "m-F16.gguf", "mmproj") == "mmproj-BF16.gguf"  # 0 off, as F16: the first again
    more = files + _files("mmproj-Q8_0.gguf")
    assert _best(more, "m-Q4_K_M.gguf", "mmproj") == "mmproj-Q8_0.gguf"  # 4 off beats 12
    assert _best(more, "m-F16.gguf", "mmproj") == "mmproj-BF16.gguf"
    assert _best(_files("m-Q4_K_M.gguf"), "m-Q4_K_M.gguf", "mmproj") is None


def test_depth_wins_over_bits_and_only_folders_above_the_model_count() -> None:
    files = _files("mmproj-Q4_0.gguf", "Q4/m-Q4_K_M.gguf", "Q4/mmproj-F16.gguf", "other/mmproj-Q4_0.gguf",
                   "Q4/deep/mmproj-Q4_0.gguf")
    # the sibling's folders must all match the model's (std::mismatch up to the sibling's folder); deeper wins
    assert _best(files, "Q4/m-Q4_K_M.gguf", "mmproj") == "Q4/mmproj-F16.gguf"
    assert _best(files, "m-Q4_K_M.gguf", "mmproj") == "mmproj-Q4_0.gguf"  # root model: only root siblings
    assert _best(_files("vision/mmproj-F16.gguf"), "m-Q4_K_M.gguf", "mmproj") is None
    assert _best(files, "Q4/deep/m-Q4_K_M.gguf", "mmproj") == "Q4/deep/mmproj-Q4_0.gguf"
    # the keyword is looked for in the whole path (`f.path.find(keyword)`), the folder too
    assert _best(_files("mmproj/vision-F16.gguf"), "mmproj/m-Q4_K_M.gguf", "mmproj") == "mmproj/vision-F16.gguf"


def test_a_tag_prefers_the_exact_name_then_its_bits() -> None:
    files = _files("mtp-Q4_0.gguf", "mtp-Q4_K_M.v2.gguf", "mtp-Q8_0.gguf", "mtp-F16.gguf")
    # "-Q4_K_M." exact although its own tag (V2) is 2 bits away and Q4_0 is 0 away: exact outranks bits
    assert _best(files, "m-Q4_K_M.gguf", "mtp-", "q4_k_m") == "mtp-Q4_K_M.v2.gguf"
    assert _best(files, "m-Q4_K_M.gguf", "mtp-", "Q8_0") == "mtp-Q8_0.gguf"
    assert _best(files, "m-Q4_K_M.gguf", "mtp-", "Q5_K_M") == "mtp-Q4_0.gguf"  # 1 off: the first of the closest
    assert _best(files, "m-F16.gguf", "mtp-") == "mtp-F16.gguf"  # no tag: the model's 16 bits
    assert _best(files, "m-F16.gguf", "mtp-", "Q8_0") == "mtp-Q8_0.gguf"  # a tag: its bits, not the model's


def test_sidecars_follow_the_options() -> None:
    files = _files("m-Q4_K_M.gguf", "m-F16.gguf", "mmproj-F16.gguf", "mmproj-Q8_0.gguf", "mtp-Q4_K_M.gguf",
                   "mtp-F16.gguf", "dflash-Q4_K_M.gguf", "eagle3-Q4_K_M.gguf", "dspark-Q4_K_M.gguf")

    def got(primary: str, tag: str, **kw: object) -> list[tuple[str, str, bool]]:
        return [(s.role, s.path, s.is_draft) for s in sidecars(files, primary, tag, SidecarOptions(**kw))]  # type: ignore[arg-type]

    assert got("m-Q4_K_M.gguf", "") == [("mmproj", "mmproj-Q8_0.gguf", False)]
    assert got("m-Q4_K_M.gguf", "", mmproj=False) == []
    assert got("m-Q4_K_M.gguf", "Q4_K_M", spec_types=("draft-mtp",)) == [
        ("mmproj", "mmproj-Q8_0.gguf", False), ("mtp", "mtp-Q4_K_M.gguf", True)]
    # -hff m-F16.gguf with the tag Q4_K_M: the projector by the file's bits, the MTP head by the tag's
    assert got("m-F16.gguf", "Q4_K_M", spec_types=("draft-mtp",)) == [
        ("mmproj", "mmproj-F16.gguf", False), ("mtp", "mtp-Q4_K_M.gguf", True)]
    # queued mmproj, mtp, dflash, eagle3, dspark (arg.cpp:636-676): the first is the draft
    assert got("m-Q4_K_M.gguf", "", mmproj=False, spec_types=("draft-eagle3", "draft-dflash")) == [
        ("dflash", "dflash-Q4_K_M.gguf", True), ("eagle3", "eagle3-Q4_K_M.gguf", False)]
    assert got("m-Q4_K_M.gguf", "", mmproj=False, spec_types=("draft-mtp",), draft_given=True) == [
        ("mtp", "mtp-Q4_K_M.gguf", False)]  # -md: downloaded, not used (arg.cpp:640)
    assert got("m-Q4_K_M.gguf", "", mmproj=False, spec_types=("draft-mtp",), draft_elsewhere=True) == []


def test_a_model_in_a_subfolder_and_a_split_set() -> None:
    files = _files("mmproj-F16.gguf", "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf",
                   "Q4_K_M/mmproj-Q4_0.gguf", "BF16/mmproj-BF16.gguf", "Q4_K_M/mtp-Q8_0.gguf", "mtp-Q4_0.gguf")
    primary = resolve_files(files, "u/r", "Q4_K_M")[0].path
    assert primary == "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf"
    side = sidecars(files, primary, "Q4_K_M", SidecarOptions(spec_types=("draft-mtp",)))
    assert [s.path for s in side] == ["Q4_K_M/mmproj-Q4_0.gguf", "Q4_K_M/mtp-Q8_0.gguf"]  # its folder, deeper


@pytest.mark.parametrize("argv,want", [
    ([], SidecarOptions()),
    (["--no-mmproj"], SidecarOptions(mmproj=False)),
    (["--no-mmproj", "--mmproj-auto"], SidecarOptions()),
    (["-mm", "/x/proj.gguf"], SidecarOptions(mmproj=False)),
    (["-mmu", "http://127.0.0.1:9/p.gguf"], SidecarOptions(mmproj=False)),
    (["--spec-type", "draft-mtp"], SidecarOptions(spec_types=("draft-mtp",))),
    (["--spec-type", "none,draft-mtp"], SidecarOptions()),  # a `none` switches the list off
    (["--spec-type", "draft-mtp", "-md", "/x/d.gguf"], SidecarOptions(spec_types=("draft-mtp",), draft_given=True)),
    (["--spec-type", "draft-mtp", "-hfd", "u/d"], SidecarOptions(spec_types=("draft-mtp",), draft_elsewhere=True)),
])
def test_sidecar_options_from_the_flags(argv: list[str], want: SidecarOptions) -> None:
    assert sidecar_options(settings_of(["-hf", "u/m", *argv])) == want


# ---- the CLI, over the loopback Hub ----

def _vl_repo(hub: LoopbackHub, t: dict[str, Path], name: str = "u/vl") -> str:
    hub.add_repo(name, {"m-Q4_K_M.gguf": t["tiny-mtp"], "m-Q8_0.gguf": t["tiny-mtp-q8_0"],
                        "mmproj-F16.gguf": t["tiny-nomtp"], "mtp-Q4_K_M.gguf": t["tiny-nomtp"]})
    return name


def _resolved(hub: LoopbackHub) -> list[str]:
    return sorted({h.path.rsplit("/", 1)[-1] for h in hub.hits("/resolve/")})


def test_plan_names_the_projector_and_no_mmproj_drops_it(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    repo = _vl_repo(hub, tiny_models)
    size = tiny_models["tiny-nomtp"].stat().st_size
    out = plan_cli("-hf", repo, *FLAGS)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("llama-server also downloads")]
    assert lines == [f"llama-server also downloads mmproj-F16.gguf ({size / 2**20:.1f} MiB) and loads it on the "
                     "first GPU (--mmproj-offload is the default), with its own compute buffer: not in this plan "
                     "(--fit reserves room for it before fitting); --no-mmproj skips it"], out.stdout
    assert "mtp-Q4_K_M" not in out.stdout  # no --spec-type draft-mtp: no MTP sidecar
    assert _resolved(hub) == ["m-Q4_K_M.gguf"]  # only the planned model's header was read
    for extra, where in ((["--no-mmproj-offload"], "in host memory (--no-mmproj-offload)"),
                         (["-dev", "CUDA1"], "on CUDA1 (--device's first)"), (["-mmdev", "none"], "in host memory")):
        assert f"loads it {where}" in plan_cli("-hf", repo, *FLAGS, *extra).stdout
    hub.clear()
    none = plan_cli("-hf", repo, *FLAGS, "--no-mmproj")
    assert none.returncode == 0, none.stderr
    assert "also downloads" not in none.stdout and "mmproj" not in none.stdout
    assert not hub.hits("/resolve/")  # the listing and the header were cached: no request at all
    assert "also downloads" not in plan_cli("-hf", repo, *FLAGS, "-mm", str(tiny_models["tiny-nomtp"])).stdout


def test_the_mtp_sidecar_is_named_only_with_draft_mtp(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    repo = _vl_repo(hub, tiny_models)
    out = plan_cli("-hf", repo, *FLAGS, "--spec-type", "draft-mtp")
    assert out.returncode == 0, out.stderr
    mtp = [ln for ln in out.stdout.splitlines() if "mtp-Q4_K_M.gguf" in ln]
    assert len(mtp) == 1 and "as the draft model for --spec-type draft-mtp" in mtp[0], out.stdout
    assert "counts no separate draft model" in mtp[0]
    assert "mmproj-F16.gguf" in out.stdout
    assert _resolved(hub) == ["m-Q4_K_M.gguf"]
    with_md = plan_cli("-hf", repo, *FLAGS, "--spec-type", "draft-mtp", "-md", str(tiny_models["tiny-nomtp"]))
    assert "MiB) for --spec-type draft-mtp, but the -md draft is used" in with_md.stdout, with_md.stdout
    no_spec = plan_cli("-hf", repo, *FLAGS, "--spec-type", "ngram-simple")
    assert "mtp-Q4_K_M" not in no_spec.stdout


def test_json_has_the_sidecars(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    repo = _vl_repo(hub, tiny_models)
    size = tiny_models["tiny-nomtp"].stat().st_size
    got = plan_json("-hf", f"{repo}:Q4_K_M", *FLAGS, "--spec-type", "draft-mtp")["remote"]["sidecars"]
    assert got == [{"role": "mmproj", "path": "mmproj-F16.gguf", "size": size, "is_draft": False, "in_plan": False},
                   {"role": "mtp", "path": "mtp-Q4_K_M.gguf", "size": size, "is_draft": True, "in_plan": False}]
    assert plan_json("-hf", repo, *FLAGS, "--no-mmproj")["remote"]["sidecars"] == []
    assert json.dumps(plan_json("-m", str(tiny_models["tiny-mtp"]), *FLAGS)).count("sidecars") == 0


def test_a_model_without_mtp_layers_names_the_repo_s_mtp_head(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/head", {"m-Q4_K_M.gguf": tiny_models["tiny-nomtp"], "mtp-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    msg = one_error(plan_cli("-hf", "u/head", *FLAGS, "--spec-type", "draft-mtp", "--json"))
    assert "has no MTP (NextN) layers" in msg and "this repo ships mtp-Q4_K_M.gguf" in msg


# ---- the real llama-server downloads what `sidecars` predicts ----

@pytest.mark.parametrize("extra", [[], ["--no-mmproj", "--spec-type", "draft-mtp"]], ids=["mmproj", "mtp"])
def test_llama_server_downloads_what_sidecars_predict(server_bin: Path, tiny_models: dict[str, Path],
                                                      tmp_path: Path, extra: list[str]) -> None:
    from tui.core.remote.fetch import fetch_model
    from tui.core.remote.hub import sidecar_options as options_of
    from tui.core.remote.source import source_of
    from tui.core.server.supervisor import Supervisor

    with serve() as hub:
        _vl_repo(hub, tiny_models, "user/repo")
        settings = settings_of(["-hf", "user/repo:Q4_K_M", "-c", "256", "-np", "1", "-t", "1", "-tb", "1", *extra])
        env = server_env(tmp_path)
        env["HF_ENDPOINT"] = hub.url
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HF_ENDPOINT", hub.url)
            got = fetch_model(source_of(settings), sidecar_opts=options_of(settings))  # type: ignore[arg-type]
        want = sorted([got.name, *(s.path for s in got.sidecars)])
        assert want == (["m-Q4_K_M.gguf", "mmproj-F16.gguf"] if not extra else ["m-Q4_K_M.gguf", "mtp-Q4_K_M.gguf"])
        hub.clear()
        with Supervisor(server_bin, settings, env=env, log_dir=tmp_path / "logs", ready_timeout=60.0,
                        poll_interval=0.05) as sup:
            sup.start()
            sup.wait_ready()  # a tiny model as the projector may fail to load: only the downloads matter
        fetched = sorted({h.path.rsplit("/", 1)[-1] for h in hub.hits("/resolve/") if h.method == "GET"})
    assert fetched == want, hub.log
