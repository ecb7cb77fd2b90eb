"""The one device list (planning.devices.device_set): llama.cpp's order and names, the same
devices for every caller (TUI, `plan`, `probe`, `sweep`), and the planner bugs the old copies had
(`none,draft-mtp`, repeated `-ot`, last-wins flags, defaults from the option table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.gpu.types import GpuDevice, GpuProcess, GpuSnapshot, HostMemory, ProcessKind, Source, Status
from tui.core.options.lookup import default
from tui.core.options.settings import Settings
from tui.core.planning import devices as devmod
from tui.core.planning.devices import HOST, DeviceSpec, device_set
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.planning.resolve import resolve
from tui.core.demo.tiny_model import PRESETS, write_tiny_model

PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _gpu(index: int, bus: str, total: int, used: int, free: int, ours_mib: int = 0) -> GpuDevice:
    procs = (GpuProcess(4242, "llama-server", ours_mib, ProcessKind.COMPUTE, is_ours=True),) if ours_mib else ()
    return GpuDevice(index=index, name=f"NVIDIA GPU {index}", uuid=f"GPU-{index:08x}", pci_bus_id=bus,
                     memory_total_mib=total, memory_used_mib=used, memory_free_mib=free, processes=procs)


def _snapshot(*devs: GpuDevice, ram_total: int = 65536) -> GpuSnapshot:
    return GpuSnapshot(seq=1, taken_at=0.0, monotonic_s=0.0, sample_ms=0.0, source=Source.NVML, status=Status.OK,
                       message="", devices=tuple(devs), host=HostMemory(ram_total, ram_total // 2))


# NVML index 0 sits on the later PCI bus: with PCI_BUS_ID (and for identical models) CUDA0 is NVML 1.
SNAP = _snapshot(_gpu(0, "00000000:41:00.0", 24576, 4096, 20000, ours_mib=3000),
                 _gpu(1, "00000000:17:00.0", 24576, 1024, 23000))


def test_cuda_order_and_names_then_free_memory_counts_our_server() -> None:
    devs = device_set(SNAP, env=PCI).devices
    assert [(d.key, d.name) for d in devs] == [("CUDA0", "NVIDIA GPU 1"), ("CUDA1", "NVIDIA GPU 0")]
    assert devs[0].free_mib == 23000 and devs[1].free_mib == 23000  # 20000 free + 3000 held by our server
    assert not any(d.remote for d in devs)


def test_rpc_devices_come_first_named_as_llama_cpp_names_them() -> None:
    ds = device_set(SNAP, ["10.0.0.2:50052", "10.0.0.3:50052"], 8192.0, env=PCI)
    devs = ds.devices
    # src/llama.cpp puts RPC devices at the front; each server's buffers are RPC0[endpoint], and the
    # device names count over all servers (ggml_backend_rpc_add_server).
    assert [d.key for d in devs] == ["RPC0[10.0.0.2:50052]", "RPC0[10.0.0.3:50052]", "CUDA0", "CUDA1"]
    assert [d.name for d in devs[:2]] == ["RPC0", "RPC1"]
    assert all(d.remote and d.total_mib == d.free_mib == 8192 for d in devs[:2])  # --rpc-mib: not asked
    assert ds.count == 4 and ds.unreachable == () and ds.readings == () and ds.source == "2 RPC + nvml"
    assert (ds.host_total_mib, ds.host_free_mib) == (65536, 32768)
    assert device_set(None).devices == () and device_set(None).count == 0


def test_simulated_profile_names_lose_the_suffix() -> None:
    devs = devmod.devices_now("2xv100-16g").devices
    assert [(d.key, d.name, d.total_mib) for d in devs] == [("CUDA0", "Tesla V100-SXM2-16GB", 16384.0),
                                                             ("CUDA1", "Tesla V100-SXM2-16GB", 16384.0)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("dev") / "tiny.gguf", PRESETS["tiny-moe-mtp"])


def test_every_caller_gets_the_same_devices(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core.probes.session import predict_memory
    from tui.core.lab.planning import plan_check
    from tui.core.lab.knobs import this_machine
    from tui.ui.cockpit.planning import devices_for
    from tui.ui.options import AppOptions

    for k, v in PCI.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(devmod, "current_snapshot", lambda profile=None, gpus=True: SNAP)
    want = device_set(SNAP).devices  # "h:1" answers no one: left out by every caller
    assert devices_for(SNAP, AppOptions(), ["h:1"]).devices == want  # the TUI
    assert devmod.devices_now(None, ["h:1"]).devices == want  # mtp-tune plan
    assert tuple(this_machine(Settings(rpc=["h:1"]))[0]) == want  # the searches
    p, _ = predict_memory(Settings(model=str(tiny), rpc=["h:1"]))  # mtp-tune probe
    assert p is not None
    keyed = [(d.key, d.free_mib) for d in p.devices if d.key != HOST]
    assert keyed == [(d.key, d.free_mib) for d in want]
    verdict = plan_check()(Settings(model=str(tiny)))  # mtp-tune sweep (RPC rows are not planned)
    assert verdict is not None and verdict.details is not None
    names = [d["name"] for d in verdict.details["prediction"]["devices"]]
    assert names == [f"{d.key} ({d.name})" for d in want if not d.remote] + [HOST]


# ---- planner bugs from the old argv copies ---------------------------------------------------------


@pytest.fixture(scope="module")
def meta(tiny: Path):  # noqa: ANN201
    return read_gguf(tiny)


def test_spec_type_list_with_none_plans_mtp_off(meta) -> None:  # noqa: ANN001
    """`--spec-type none,draft-mtp` is off for llama.cpp and the validator: no MTP weights, no draft KV."""
    r = resolve(Settings(spec_type=["none", "draft-mtp"]), meta.hparams)
    assert not r.mtp and r.n_rs_seq == 0
    assert resolve(Settings(spec_type=["draft-mtp"]), meta.hparams).mtp
    p = plan(meta, Settings(spec_type=["none", "draft-mtp"], fit=False), [])
    assert p.device(HOST).components["draft_kv"] == 0


def test_every_override_tensor_counts(meta) -> None:  # noqa: ANN001
    """llama.cpp accumulates repeated `-ot`; the old planner used only the first one."""
    one = ["-ot", r"blk\.0\.ffn_.*_exps=CPU"]
    two = one + ["-ot", r"blk\.1\.ffn_.*_exps=CPU"]
    r = resolve(Settings(extra_args=two), meta.hparams)
    assert r.cpu_overrides == (r"blk\.0\.ffn_.*_exps", r"blk\.1\.ffn_.*_exps") and r.has_overrides
    gpu = [DeviceSpec("CUDA0", "GPU", 24576.0, 24576.0)]
    w1 = plan(meta, Settings(fit=False, extra_args=one), gpu).device("CUDA0").components["weights"]
    w2 = plan(meta, Settings(fit=False, extra_args=two), gpu).device("CUDA0").components["weights"]
    assert w2 < w1


def test_flags_follow_last_wins(meta) -> None:  # noqa: ANN001
    assert resolve(Settings(parallel=2, extra_args=["-kvu"]), meta.hparams).kv_unified
    assert not resolve(Settings(parallel=2, extra_args=["-kvu", "--no-kv-unified"]), meta.hparams).kv_unified
    assert not resolve(Settings(extra_args=["-nkvo"]), meta.hparams).offload_kqv
    assert resolve(Settings(extra_args=["-nkvo", "--kv-offload"]), meta.hparams).offload_kqv


def test_defaults_come_from_the_option_table(meta) -> None:  # noqa: ANN001
    r = resolve(Settings(ctx_size=8192), meta.hparams)
    assert r.n_ubatch == default("--ubatch-size") and r.n_batch == default("--batch-size")
    assert r.fit_target_mib == (default("--fit-target"),) and r.fit_ctx == default("--fit-ctx")
    assert resolve(Settings(ctx_size=8192, spec_type=["draft-mtp"]), meta.hparams).n_rs_seq == default("--spec-draft-n-max")
