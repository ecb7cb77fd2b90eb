"""Values that can never launch are refused in one sentence, exit 2, before anything is built or started.

Why: `--gpus 99999999999x1GiB` allocated until killed; `--rpc-mib -5`, `--axis ub=0`, a workload
longer than the model was trained on and `ctx_size = 99999999999999999999` in a profile were
accepted and failed later, or never. Each refusal comes from the one validator the form uses
(`validate.value_errors` inside `validate`), so the CLI and the form say the same words.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tui.cli import main
from tui.core.demo.tiny_model import preset, write_tiny_model
from tui.core.gpu.profiles import MAX_GPUS, parse_gpus_spec
from tui.core.options.fields import FIELDS
from tui.core.options.rules import MAX_DEVICES
from tui.core.options.settings import Settings
from tui.core.options.validate import validate, value_errors
from tui.core.options.values import INT32_MAX, INT32_MIN
from tui.core.presets import parse_preset
from tui.core.presets.profiles import ProfileError, profiles_dir, settings_from_toml
from tui.core.sweep.axes import parse_axis

INT_FIELDS = [f for f in FIELDS if f.kind == "int"]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; assert exit 2 and return its one error line (argparse's usage line aside)."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage error
        rc = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith(("usage:", " "))]
    assert len(lines) == 1, err
    return lines[0]


def form_messages(**fields: object) -> list[str]:
    return [p.message for p in validate(Settings(**fields), require_model=False) if p.severity == "error"]


@pytest.fixture(scope="module")
def short_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MTP GGUF trained on 1024 tokens."""
    return write_tiny_model(tmp_path_factory.mktemp("bounds") / "short.gguf", preset("tiny-mtp", ctx=1024))


# --------------------------------------------------------------------------- devices


def test_a_huge_gpu_count_is_refused_before_anything_is_built() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"--gpus: '99999999999x1GiB' asks for more than {MAX_GPUS} GPUs"):
            parse_gpus_spec("99999999999x1GiB")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # one device list of 10^11 entries would be gigabytes


@pytest.mark.parametrize("spec", ["17x1GiB", "9x1GiB,8x1GiB", ",".join(["1GiB"] * 17), "1" + "0" * 400 + "x1GiB"])
def test_more_than_16_simulated_devices_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="CUDA build sees at most 16"):
        parse_gpus_spec(spec)
    assert len(parse_gpus_spec("16x1GiB").devices) == 16  # type: ignore[union-attr]


def test_a_device_size_beyond_any_device_is_one_sentence() -> None:
    with pytest.raises(ValueError, match="larger than 16 TiB"):
        parse_gpus_spec("9" * 400 + "GiB")


def test_plan_refuses_a_huge_gpus_spec_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["plan", "-m", "absent.gguf", "--gpus", "99999999999x1GiB"], capsys)
    assert line.startswith("mtp-tune: --gpus: '99999999999x1GiB' asks for more than 16 GPUs")


def test_too_many_rpc_servers_are_refused_by_the_form_and_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    servers = [f"127.0.0.1:{50000 + i}" for i in range(MAX_DEVICES + 1)]
    message = "rpc: 17 servers; llama-server drives at most 16 devices (GPUs and RPC servers together)."
    assert message in form_messages(rpc=servers)
    out = refused(["plan", "-m", "absent.gguf", "--rpc", ",".join(servers), "--rpc-mib", "1024"], capsys)
    assert out == f"mtp-tune: {message}"  # one line per refused value, the first after the prefix
    assert form_messages(rpc=servers[:MAX_DEVICES]) == []


def test_the_device_count_from_gpus_and_rpc_together_is_capped() -> None:
    msgs = [p.message for p in validate(Settings(), device_count=MAX_DEVICES + 1, require_model=False)]
    assert any(m.startswith("17 devices; llama-server drives at most 16") for m in msgs)


@pytest.mark.parametrize("mib", ["-5", "0", "nan", "inf", "1e30", "lots"])
def test_rpc_mib_outside_a_device_size_is_a_usage_error(mib: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["plan", "-m", "absent.gguf", "--rpc", "127.0.0.1:50052", "--rpc-mib", mib], capsys)
    assert "argument --rpc-mib:" in line


@pytest.mark.parametrize("flag,count", [("-ts", 16), ("--fit-target", 16)])
def test_per_device_lists_longer_than_llama_server_takes_are_refused(flag: str, count: int) -> None:
    field = "tensor_split" if flag == "-ts" else "fit_target"
    bad = value_errors(Settings(**{field: [1] * count}))
    assert [p.field for p in bad] == [field] and "at most 15" in bad[0].message
    assert value_errors(Settings(**{field: [1] * (count - 1)})) == []


# --------------------------------------------------------------------------- 32-bit numbers


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(INT_FIELDS), st.one_of(st.integers(max_value=INT32_MIN - 1), st.integers(min_value=INT32_MAX + 1)))
def test_every_whole_number_field_refuses_what_std_stoi_cannot_read(spec: object, value: int) -> None:
    bad = value_errors(Settings(**{spec.field: value}))  # type: ignore[attr-defined]
    assert [p.field for p in bad] == [spec.field]  # type: ignore[attr-defined]
    assert bad[0].message.startswith(f"{spec.label}: {value} is out of range; llama-server reads it as a 32-bit")  # type: ignore[attr-defined]


def test_gpu_layers_beyond_32_bits_is_refused() -> None:
    assert any("gpu-layers: 99999999999 is out of range" in m for m in form_messages(n_gpu_layers="99999999999"))


# --------------------------------------------------------------------------- sweep and tune axes


@pytest.mark.parametrize("axis,expected", [
    ("ub=0", "ubatch-size: 0 is below 1"), ("b=0", "batch-size: 0 is below 1"),
    ("ctx-size=-1", "ctx-size: -1 is below 0"), ("spec-draft-n-max=-1", "spec-draft-n-max: -1 is below 0"),
    ("np=0", "parallel: 0 is rejected"), ("ctx-size=99999999999999999999", "out of range"),
    ("spec-ngram-mod-n-min=2000", "2000 is above 1024"),
])
def test_a_sweep_axis_value_that_can_never_launch_is_refused(axis: str, expected: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["sweep", "-m", "absent.gguf", "--axis", "mtp=on,off", "--axis", axis], capsys)
    name = axis.split("=")[0]
    assert line.startswith(f"mtp-tune: --axis {name}: ") and expected in line
    form = line.removeprefix(f"mtp-tune: --axis {name}: ")
    field = {"ub": "ubatch_size", "b": "batch_size", "np": "parallel"}.get(name, name.replace("-", "_"))
    if field in {f.field for f in FIELDS}:
        value = axis.split("=")[1]
        assert form in form_messages(**{field: int(value)})  # the form's own words


def test_a_sweep_axis_value_valid_alone_but_not_with_the_defaults_is_kept() -> None:
    assert parse_axis("ub=4096").values == (4096,)  # ubatch > the default batch: the grid decides, with -b known


@pytest.mark.parametrize("axis,expected", [("ubatch=0", "ubatch-size: 0 is below 1"),
                                           ("batch=0", "batch-size: 0 is below 1"),
                                           ("threads=0", "threads: 0 threads cannot run")])
def test_a_tune_axis_value_that_can_never_launch_is_refused(axis: str, expected: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["tune", "-m", "absent.gguf", "--workload", "64:32", "--axis", axis], capsys)
    assert line.startswith(f"mtp-tune: --axis {axis.split('=')[0]}: {expected}")


# --------------------------------------------------------------------------- workloads and the training context


def test_a_tune_workload_longer_than_the_training_context_is_refused(short_model: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["tune", "-m", str(short_model), "--workload", "1000:100", "--gpus", "cpu"], capsys)
    assert line == ("mtp-tune: --workload 1000:100: 1100 tokens is longer than the model's training context "
                    "(1024 tokens); shorten it to fit.")


def test_a_sweep_objective_or_generation_longer_than_the_training_context_is_refused(
        short_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["sweep", "-m", str(short_model), "--axis", "mtp=on,off", "--objective", "workload:1k,100"], capsys)
    assert line.startswith("mtp-tune: --objective workload:1k,100: 1100 tokens is longer than the model's training")
    line = refused(["sweep", "-m", str(short_model), "--axis", "n-predict=64,2k"], capsys)
    assert line.startswith("mtp-tune: --axis n-predict=2k: 2000 tokens is longer")


def test_a_probe_generation_longer_than_the_training_context_is_refused(short_model: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["probe", "-m", str(short_model), "--n-predict", "4096"], capsys)
    assert line.startswith("mtp-tune: --n-predict 4096: 4096 tokens is longer than the model's training context (1024")


# --------------------------------------------------------------------------- profiles and presets


HUGE_CTX = '[settings]\nmodel = "a.gguf"\nctx_size = 99999999999999999999\n'


def test_a_toml_profile_value_out_of_range_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as e:
        settings_from_toml(HUGE_CTX, "p.toml")
    assert str(e.value) == ("p.toml (line 3): ctx-size: 99999999999999999999 is out of range; llama-server reads it "
                            "as a 32-bit whole number (-2147483648..2147483647) and refuses to start. Fix or delete "
                            "that line.")
    assert "ctx-size: 99999999999999999999 is out of range" in form_messages(ctx_size=10**20 - 1)[0]


def test_profile_import_refuses_out_of_range_toml_and_ini(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "huge.toml"
    toml.write_text(HUGE_CTX)
    assert refused(["profile", "import", str(toml)], capsys).startswith(f"mtp-tune: {toml} (line 3): ctx-size:")
    ini = tmp_path / "huge.ini"
    ini.write_text("[*]\nparallel = 1\n\n[m]\nmodel = a.gguf\nctx-size = 99999999999999999999\n")
    line = refused(["profile", "import", str(ini)], capsys)
    assert line.startswith(f"mtp-tune: {ini}:6: [m]: ctx-size: 99999999999999999999 is out of range")
    assert not (profiles_dir() / "m.toml").exists() and not (profiles_dir() / "huge.toml").exists()


def test_preset_check_reports_an_out_of_range_value_at_its_line() -> None:
    pf = parse_preset("[m]\nmodel = a.gguf\nubatch-size = 0\nparallel = 99999999999\n")
    errs = [(p.line, p.key, p.message) for p in pf.problems if p.severity == "error"]
    assert [(line, key) for line, key, _ in errs] == [(3, "ubatch-size"), (4, "parallel")]
    assert errs[0][2] in form_messages(ubatch_size=0)
