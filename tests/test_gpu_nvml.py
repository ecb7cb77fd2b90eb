"""The NVML layer against a fake `pynvml` that behaves like nvidia-ml-py (tests/fakes/fake_pynvml.py)."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_gpus import ANCIENT_DRIVER_MISSING, OLD_DRIVER_MISSING, FakeGpu, FakeProcess, gpu
from tests.fakes.fake_pynvml import FakeNvml
from tests.fakes.nvml_errors import ERROR_CODES, C
from tui.core.gpu import NA, GpuDevice, Nvml, ProcessKind, Source, Status


def _nvml(fake: FakeNvml, **kwargs: object) -> Nvml:
    return Nvml(fake.module, register_atexit=False, **kwargs)  # type: ignore[arg-type]


def _two_gpus() -> list[FakeGpu]:
    return [
        gpu(0, name="NVIDIA GeForce RTX 4090", total_mib=24564, used_mib=480, reserved_mib=300, util_gpu=37,
            util_mem=12, temp_c=51, power_mw=123456, limit_mw=450000,
            compute=[FakeProcess(4242, 17000, "/opt/llama/bin/llama-server")],
            graphics=[FakeProcess(1000, 450, "/usr/lib/xorg/Xorg")]),
        gpu(1, name="NVIDIA GeForce RTX 3090", total_mib=24576, used_mib=20000,
            compute=[FakeProcess(5151, 19500, "python3"), FakeProcess(4243, 400, "ggml-rpc-server")]),
    ]


# -- the fake is faithful to the real bindings --------------------------------------------------


def test_fake_matches_real_bindings_names_codes_and_signatures() -> None:
    real = pytest.importorskip("pynvml")
    fake = FakeNvml().module
    for name, code in ERROR_CODES.items():
        assert getattr(real, name) == code, name
    for name in dir(fake):
        if name.startswith(("nvml", "NVMLError", "NVML_")) or name == "NVMLLibraryMismatchError":
            assert hasattr(real, name), f"fake has {name}, real pynvml does not"
    for name in dir(fake):
        if name.startswith("nvml") and callable(getattr(fake, name)) and name != "nvmlExceptionClass":
            real_params = list(inspect.signature(getattr(real, name)).parameters)
            fake_params = list(inspect.signature(getattr(fake, name)).parameters)
            if real_params and real_params != ["args", "kwargs"]:
                assert len(fake_params) >= len([p for p in real_params if p != "version"]), name
    # Error classes: same names, and NVMLError(code) returns the subclass, as in pynvml.
    for code in ERROR_CODES.values():
        assert type(fake.NVMLError(code)).__name__ == type(real.NVMLError(code)).__name__
    assert isinstance(fake.NVMLError(15), fake.NVMLError_GpuIsLost)
    assert fake.NVMLError_GpuIsLost().value == 15 and str(fake.NVMLError_GpuIsLost()) == "GPU is lost"
    assert fake.nvmlMemory_v2 == real.nvmlMemory_v2


def test_fake_raises_like_real_bindings() -> None:
    fake = FakeNvml([gpu(0)], missing={"nvmlDeviceGetComputeRunningProcesses_v3"})
    m = fake.module
    with pytest.raises(m.NVMLError_Uninitialized):
        m.nvmlDeviceGetCount()
    m.nvmlInit()
    h = m.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(m.NVMLError_FunctionNotFound):
        m.nvmlDeviceGetComputeRunningProcesses_v3(h)
    with pytest.raises(m.NVMLLibraryMismatchError):
        m.nvmlDeviceGetComputeRunningProcesses(h)
    with pytest.raises(m.NVMLError_InvalidArgument):
        m.nvmlDeviceGetHandleByIndex(5)
    missing_lib = FakeNvml(library_present=False).module
    with pytest.raises(missing_lib.NVMLError_LibraryNotFound):
        missing_lib.nvmlInit()
    with pytest.raises(missing_lib.NVMLError_Uninitialized):  # nvmlLib is None: like pynvml
        missing_lib.nvmlDeviceGetCount()


# -- a healthy machine ----------------------------------------------------------------------------


def test_reads_every_device_and_field() -> None:
    fake = FakeNvml(_two_gpus())
    r = _nvml(fake).read(ours={4242})
    assert (r.source, r.status) == (Source.NVML, Status.OK)
    assert r.driver_version == "570.86.15" and r.cuda_driver_version == "12.8"
    assert r.nvml_version == "12.570.86.15"
    assert len(r.devices) == 2
    d0, d1 = r.devices
    assert (d0.index, d0.name, d0.uuid) == (0, "NVIDIA GeForce RTX 4090", fake.gpus[0].uuid)
    assert d0.pci_bus_id == "00000000:17:00.0" and isinstance(d0.pci_bus_id, str)  # bytes decoded
    # memory v2: used excludes driver-reserved memory, as nvidia-smi shows it
    assert (d0.memory_total_mib, d0.memory_used_mib, d0.memory_free_mib) == (24564, 480, 24564 - 480 - 300)
    assert (d0.utilization_gpu_percent, d0.utilization_memory_percent, d0.temperature_c) == (37, 12, 51)
    assert (d0.power_draw_w, d0.power_limit_w) == (123.5, 450.0)
    assert d0.error is None and d0.processes_status == "ok"
    assert d1.name == "NVIDIA GeForce RTX 3090" and d1.memory_used_mib == 20000


def test_processes_names_kinds_and_ours() -> None:
    fake = FakeNvml(_two_gpus())
    r = _nvml(fake).read(ours={4242, 4243})
    p0 = {p.pid: p for p in r.devices[0].processes}
    p1 = {p.pid: p for p in r.devices[1].processes}
    assert set(p0) == {4242, 1000} and set(p1) == {5151, 4243}
    assert p0[4242].name == "llama-server" and p0[4242].is_ours and p0[4242].kind is ProcessKind.COMPUTE
    assert p0[4242].used_memory_mib == 17000
    assert p0[1000].name == "Xorg" and not p0[1000].is_ours and p0[1000].kind is ProcessKind.GRAPHICS
    assert p1[4243].is_ours and not p1[5151].is_ours and p1[5151].name == "python3"


def test_ours_may_be_one_pid_or_none() -> None:
    fake = FakeNvml(_two_gpus())
    nvml = _nvml(fake)
    assert [p.pid for p in nvml.read(ours=4242).devices[0].processes if p.is_ours] == [4242]
    assert not any(p.is_ours for d in nvml.read(ours=None).devices for p in d.processes)


def test_a_process_in_both_lists_is_listed_once() -> None:
    g = gpu(0, compute=[FakeProcess(77, 900, "app")], graphics=[FakeProcess(77, 1000, "app")])
    (dev,) = _nvml(FakeNvml([g])).read().devices
    assert len(dev.processes) == 1
    assert dev.processes[0].kind is ProcessKind.BOTH and dev.processes[0].used_memory_mib == 1000


def test_process_memory_not_available_is_na() -> None:
    g = gpu(0, compute=[FakeProcess(31, None, "wsl-app")])
    (dev,) = _nvml(FakeNvml([g])).read().devices
    assert dev.processes[0].used_memory_mib is NA


def test_process_name_from_proc_comm_when_nvml_has_none(tmp_path: Path) -> None:
    (tmp_path / "31337").mkdir()
    (tmp_path / "31337" / "comm").write_text("llama-server\n")
    g = gpu(0, compute=[FakeProcess(31337, 100, None), FakeProcess(31338, 100, None)])
    (dev,) = _nvml(FakeNvml([g]), proc_root=tmp_path).read().devices
    names = {p.pid: p.name for p in dev.processes}
    assert names == {31337: "llama-server", 31338: NA}  # 31338: gone from /proc too


def test_process_name_from_real_proc_for_this_process() -> None:
    g = gpu(0, compute=[FakeProcess(os.getpid(), 10, None)])
    (dev,) = _nvml(FakeNvml([g])).read().devices
    assert dev.processes[0].name == Path(f"/proc/{os.getpid()}/comm").read_text().strip()


def test_processes_appearing_and_leaving_between_reads() -> None:
    fake = FakeNvml([gpu(0)])
    nvml = _nvml(fake)
    assert nvml.read().devices[0].processes == ()
    fake.gpus[0].compute.append(FakeProcess(600, 1200, "llama-server"))
    fake.gpus[0].compute.append(FakeProcess(601, 300, "python"))
    assert [p.pid for p in nvml.read(ours={600}).devices[0].processes] == [600, 601]
    fake.gpus[0].compute.pop(0)
    fake.gpus[0].compute.append(FakeProcess(600, 50, "other-tool"))  # pid reused by another program
    fake.gpus[0].compute.pop(0)
    procs = nvml.read().devices[0].processes
    assert [(p.pid, p.name, p.is_ours) for p in procs] == [(600, "other-tool", False)]


def test_process_leaving_between_list_and_name_lookup() -> None:
    fake = FakeNvml([gpu(0, compute=[FakeProcess(700, 100, "short-lived")])])

    def vanish(fn: str) -> None:
        if fn == "nvmlSystemGetProcessName":
            fake.gpus[0].compute.clear()  # exits right after NVML listed it

    fake.on_call = vanish
    (dev,) = _nvml(fake, proc_root="/nonexistent").read().devices
    assert [(p.pid, p.name, p.used_memory_mib) for p in dev.processes] == [(700, NA, 100)]


# -- failure states -------------------------------------------------------------------------------


def test_library_not_found_is_a_state_not_an_exception() -> None:
    r = _nvml(FakeNvml([gpu(0)], library_present=False)).read()
    assert (r.source, r.status, r.devices) == (Source.NONE, Status.LIBRARY_NOT_FOUND, ())
    assert r.message.startswith("NVML not available: ") and "libnvidia-ml.so.1" in r.message


def test_library_not_found_through_sys_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([gpu(0)], library_present=False)
    fake.install(monkeypatch)
    nvml = Nvml(register_atexit=False)  # lazily imports `pynvml` from sys.modules
    assert nvml.module is None
    assert nvml.read().status is Status.LIBRARY_NOT_FOUND
    assert nvml.module is fake.module


def test_bindings_package_missing() -> None:
    def loader() -> object:
        raise ModuleNotFoundError("No module named 'pynvml'")

    r = Nvml(loader=loader, register_atexit=False).read()  # type: ignore[arg-type]
    assert r.status is Status.LIBRARY_NOT_FOUND and "nvidia-ml-py" in r.message


@pytest.mark.parametrize(
    ("code", "status", "words"),
    [
        (C["DRIVER_NOT_LOADED"], Status.DRIVER_NOT_LOADED, "kernel driver is not loaded"),
        (C["NO_PERMISSION"], Status.NO_PERMISSION, "permission"),
        (C["LIB_RM_VERSION_MISMATCH"], Status.VERSION_MISMATCH, "driver and bindings disagree"),
        (C["UNKNOWN"], Status.ERROR, "Unknown Error"),
    ],
)
def test_init_failures_have_clear_states(code: int, status: Status, words: str) -> None:
    r = _nvml(FakeNvml([gpu(0)], init_code=code)).read()
    assert r.status is status and r.devices == ()
    assert r.message.startswith("NVML not available: ") and words in r.message


def test_failed_init_is_retried_only_after_the_retry_interval() -> None:
    now = [0.0]
    fake = FakeNvml([gpu(0)], init_code=C["DRIVER_NOT_LOADED"])
    nvml = _nvml(fake, clock=lambda: now[0], init_retry_s=30.0)
    assert nvml.read().status is Status.DRIVER_NOT_LOADED
    assert nvml.read().status is Status.DRIVER_NOT_LOADED
    assert fake.calls["nvmlInitWithFlags"] == 1
    fake.init_code = None  # the driver got loaded
    now[0] = 31.0
    assert nvml.read().status is Status.OK
    assert fake.calls["nvmlInitWithFlags"] == 2


def test_no_devices() -> None:
    r = _nvml(FakeNvml([])).read()
    assert (r.source, r.status, r.devices) == (Source.NVML, Status.NO_DEVICES, ())
    assert "no devices" in r.message


@pytest.mark.parametrize("code", [C["GPU_IS_LOST"], C["UNKNOWN"]])
def test_a_failing_device_among_good_ones(code: int) -> None:
    gpus = [gpu(0, used_mib=1000), gpu(1, fail_code=code), gpu(2, used_mib=3000)]
    r = _nvml(FakeNvml(gpus)).read()
    assert r.status is Status.OK and [d.index for d in r.devices] == [0, 1, 2]
    good0, bad, good2 = r.devices
    assert good0.memory_used_mib == 1000 and good2.memory_used_mib == 3000 and good2.error is None
    assert bad.error is not None and bad.memory_used_mib is NA and bad.processes == ()
    assert any(w.startswith("GPU 1:") for w in r.warnings)


def test_a_device_lost_after_it_was_seen_keeps_its_name() -> None:
    fake = FakeNvml([gpu(0, name="NVIDIA H200"), gpu(1)])
    nvml = _nvml(fake)
    assert nvml.read().devices[0].error is None
    fake.gpus[0].fail_code = C["GPU_IS_LOST"]
    lost = nvml.read().devices[0]
    assert lost.name == "NVIDIA H200" and "GPU is lost" in (lost.error or "")
    fake.gpus[0].fail_code = None  # reset by the admin: the handle is fetched again
    assert nvml.read().devices[0].error is None


def test_handle_failure_on_one_device() -> None:
    r = _nvml(FakeNvml([gpu(0, handle_code=C["GPU_IS_LOST"]), gpu(1)])).read()
    assert r.devices[0].error and r.devices[1].error is None and r.devices[1].memory_total_mib == 24576


def test_old_driver_uses_v2_queries_and_reports_the_disagreement() -> None:
    g = gpu(0, compute=[FakeProcess(42, 512, "llama-server")], used_mib=2000, reserved_mib=300)
    fake = FakeNvml([g], driver_version="470.82.01", cuda_version=11040, missing=OLD_DRIVER_MISSING)
    nvml = _nvml(fake)
    r = nvml.read(ours={42})
    assert r.status is Status.VERSION_MISMATCH and "driver and bindings disagree" in r.message
    assert "470.82.01" in r.message and r.warnings[0] == r.message
    (dev,) = r.devices
    assert [(p.pid, p.is_ours, p.used_memory_mib) for p in dev.processes] == [(42, True, 512)]
    assert dev.memory_used_mib == 2300  # memory v1: used includes reserved
    assert dev.temperature_c == 40
    # Missing functions are remembered, not retried on every pass.
    nvml.read()
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 3  # v2 once (missing), then v1 per pass


def test_no_process_query_works_on_an_ancient_driver() -> None:
    g = gpu(0, compute=[FakeProcess(42, 512, "x")])
    fake = FakeNvml([g], driver_version="418.67", missing=ANCIENT_DRIVER_MISSING)
    r = _nvml(fake).read()
    assert r.status is Status.VERSION_MISMATCH
    (dev,) = r.devices
    assert dev.processes == () and "driver and bindings disagree" in dev.processes_status
    assert "process query" in r.message
    assert dev.memory_total_mib == 24576  # memory still works


def test_missing_v3_on_a_recent_driver_is_not_a_mismatch() -> None:
    fake = FakeNvml([gpu(0, compute=[FakeProcess(1, 1, "a")])], missing={"nvmlDeviceGetComputeRunningProcesses_v3"})
    r = _nvml(fake).read()
    assert r.status is Status.OK and [p.pid for p in r.devices[0].processes] == [1]


def test_functions_absent_from_older_bindings_fall_back() -> None:
    fake = FakeNvml(
        [gpu(0, temp_c=66, limit_mw=300000)],
        absent={"nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPciInfo_v3"},
    )
    (dev,) = _nvml(fake).read().devices
    assert (dev.temperature_c, dev.power_limit_w, dev.pci_bus_id) == (66, 300.0, "00000000:17:00.0")


def test_not_supported_fields_are_na_and_not_asked_again() -> None:
    g = gpu(0, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetComputeRunningProcesses_v3"})
    fake = FakeNvml([g])
    nvml = _nvml(fake)
    dev = nvml.read().devices[0]
    assert dev.power_draw_w is NA and dev.power_limit_w == 350.0
    assert "compute: not supported" in dev.processes_status
    nvml.read()
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_unexpected_exceptions_become_na(tmp_path: Path) -> None:
    fake = FakeNvml([gpu(0)])

    def explode(fn: str) -> None:
        if fn == "nvmlDeviceGetUtilizationRates":
            raise RuntimeError("driver hiccup")

    fake.on_call = explode
    (dev,) = _nvml(fake).read().devices
    assert dev.utilization_gpu_percent is NA and dev.memory_total_mib == 24576


def test_shutdown_and_lazy_reinit() -> None:
    fake = FakeNvml([gpu(0)])
    nvml = _nvml(fake)
    assert fake.calls["nvmlInitWithFlags"] == 0  # lazy: nothing before the first read
    nvml.read()
    assert fake.refcount == 1
    nvml.shutdown()
    assert fake.refcount == 0
    assert nvml.read().status is Status.OK and fake.refcount == 1


def test_read_never_raises_even_if_the_module_is_broken() -> None:
    broken = type(sys)("pynvml")
    broken.nvmlInit = lambda: None  # type: ignore[attr-defined]
    r = Nvml(broken, register_atexit=False).read()
    assert r.status in (Status.ERROR, Status.NO_DEVICES, Status.VERSION_MISMATCH) and r.devices == ()
    assert r.message


def test_devices_are_frozen() -> None:
    (dev, _) = _nvml(FakeNvml(_two_gpus())).read().devices
    assert isinstance(dev, GpuDevice) and isinstance(dev.processes, tuple)
    with pytest.raises(AttributeError):
        dev.memory_used_mib = 1  # type: ignore[misc]
    hash(dev)


def test_throttled_clocks_are_read_and_explained_and_an_old_driver_falls_back() -> None:
    from tui.core.gpu.collect import clock_warnings

    hot = gpu(0, temp_c=88, clock_event_reasons=0x40 | 0x4)  # hardware thermal slowdown, software power cap
    idle = gpu(1, clock_event_reasons=0x1)
    r = _nvml(FakeNvml([hot, idle])).read()
    assert [d.clock_event_reasons for d in r.devices] == [0x44, 0x1]
    (msg,) = clock_warnings(r.devices)  # the idle GPU and the power cap say nothing about the configuration
    assert msg.startswith("GPU 0 (") and "throttled at 88 C: hardware thermal slowdown;" in msg
    old = FakeNvml([gpu(0, clock_event_reasons=0x20)], driver_version="470.82.01", missing=OLD_DRIVER_MISSING)
    nvml = _nvml(old)
    (dev,) = nvml.read().devices
    assert dev.clock_event_reasons == 0x20 and "software thermal slowdown" in clock_warnings([dev])[0]
    nvml.read()
    assert old.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # missing: not asked again
    assert old.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2
