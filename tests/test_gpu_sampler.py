"""The sampler: one background thread, immutable snapshots, readers never blocked or torn."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading
from collections.abc import Iterable

import pytest

from tests.fakes.fake_gpus import FakeProcess, gpu
from tests.fakes.fake_pynvml import FakeNvml
from tui.core.gpu import (
    NA,
    DEFAULT_INTERVAL_S,
    GpuDevice,
    GpuProcess,
    GpuReading,
    GpuSampler,
    GpuSnapshot,
    Nvml,
    ProcessKind,
    ServerView,
    SimulatedGpus,
    Source,
    Status,
)

WAIT_S = 30.0  # upper bound for every wait; tests finish far sooner


class CountingSource:
    """Each pass k writes k everywhere; a torn or mutated snapshot breaks the invariants."""

    def __init__(self, devices: int = 3, total: int = 10_000) -> None:
        self.k = 0
        self.devices = devices
        self.total = total
        self.ours_seen: list[frozenset[int]] = []

    def read(self, ours: Iterable[int] = ()) -> GpuReading:
        self.k += 1
        k = self.k
        self.ours_seen.append(frozenset(ours))
        devs = tuple(
            GpuDevice(
                index=i,
                name=f"dev{i}",
                uuid=f"GPU-{i}",
                pci_bus_id=NA,
                memory_total_mib=self.total,
                memory_used_mib=k % self.total,
                memory_free_mib=self.total - k % self.total,
                processes=(
                    GpuProcess(1000 + k, "a", (k % self.total) // 2, ProcessKind.COMPUTE),
                    GpuProcess(2000 + k, "b", (k % self.total) - (k % self.total) // 2, ProcessKind.COMPUTE),
                ),
            )
            for i in range(self.devices)
        )
        return GpuReading(Source.NVML, Status.OK, f"pass {k}", devs, (f"w{k}",))


def check_consistent(snap: GpuSnapshot) -> int:
    """The invariants of a CountingSource snapshot; returns its k."""
    k = int(snap.message.split()[1])
    assert snap.warnings[0] == f"w{k}"
    for dev in snap.devices:
        assert dev.memory_used_mib + dev.memory_free_mib == dev.memory_total_mib  # type: ignore[operator]
        assert dev.memory_used_mib == k % dev.memory_total_mib  # type: ignore[operator]
        assert sum(p.used_memory_mib for p in dev.processes) == dev.memory_used_mib  # type: ignore[misc]
        assert {p.pid for p in dev.processes} == {1000 + k, 2000 + k}
    return k


def test_default_interval_is_one_second() -> None:
    assert DEFAULT_INTERVAL_S == 1.0 and GpuSampler(CountingSource()).interval_s == 1.0


@pytest.mark.parametrize("bad", [0, -1, 0.0])
def test_bad_interval_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        GpuSampler(CountingSource(), interval_s=bad)
    s = GpuSampler(CountingSource())
    with pytest.raises(ValueError):
        s.interval_s = bad


def test_latest_is_none_until_the_first_pass_then_sample_now_publishes() -> None:
    s = GpuSampler(CountingSource(), read_host=False)
    assert s.latest is None
    snap = s.sample_now()
    assert s.latest is snap and snap.seq == 1 and check_consistent(snap) == 1


def test_snapshots_are_deeply_immutable() -> None:
    fake = FakeNvml([gpu(0, compute=[FakeProcess(5, 100, "llama-server")])])
    snap = GpuSampler(Nvml(fake.module, register_atexit=False), server=ServerView(pid=5)).sample_now()
    targets = [(snap, "seq"), (snap.devices[0], "memory_used_mib"), (snap.devices[0].processes[0], "is_ours"),
               (snap.host, "ram_total_mib")]
    for obj, field in targets:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, 9)
    assert isinstance(snap.devices, tuple) and isinstance(snap.warnings, tuple)
    hash(snap)  # only possible when nothing inside is a list or a dict
    again = pickle.loads(pickle.dumps(snap))
    assert again == snap and copy.deepcopy(snap) == snap
    assert again.devices[0].pci_bus_id == "00000000:17:00.0"
    assert pickle.loads(pickle.dumps(NA)) is NA and copy.copy(NA) is NA


def test_background_thread_polls_and_subscribers_see_every_snapshot_in_order() -> None:
    s = GpuSampler(CountingSource(), interval_s=0.001, read_host=False)
    got: list[int] = []
    done = threading.Event()

    def on_snapshot(snap: GpuSnapshot) -> None:
        got.append(snap.seq)
        if len(got) >= 20:
            done.set()

    unsubscribe = s.subscribe(on_snapshot)
    s.start()
    try:
        assert done.wait(WAIT_S)
        unsubscribe()
    finally:
        assert s.stop()
    assert not s.running
    assert got[:20] == list(range(1, 21))
    n = len(got)
    s.sample_now()
    assert len(got) == n  # unsubscribed


def test_start_twice_runs_one_thread_and_restart_after_stop() -> None:
    s = GpuSampler(CountingSource(), interval_s=3600, read_host=False, thread_name="gpu-sampler-under-test")
    s.start()
    s.start()
    try:
        assert s.wait_for_next(0, WAIT_S) is not None
        assert [t.name for t in threading.enumerate()].count("gpu-sampler-under-test") == 1
    finally:
        assert s.stop()
    s.start()
    try:
        assert s.wait_for_next(1, WAIT_S) is not None  # a new pass after the restart
    finally:
        assert s.stop()


def test_refresh_takes_a_sample_before_the_next_tick() -> None:
    s = GpuSampler(CountingSource(), interval_s=3600, read_host=False)
    s.start()
    try:
        first = s.wait_for_next(0, WAIT_S)
        assert first is not None and first.seq == 1
        s.refresh()  # without it the next pass would be an hour away
        second = s.wait_for_next(1, WAIT_S)
        assert second is not None and second.seq == 2
    finally:
        assert s.stop()


def test_a_failing_subscriber_does_not_stop_sampling_or_other_subscribers() -> None:
    s = GpuSampler(CountingSource(), interval_s=0.001, read_host=False)
    seen: list[int] = []
    done = threading.Event()

    def bad(_: GpuSnapshot) -> None:
        raise RuntimeError("widget gone")

    def good(snap: GpuSnapshot) -> None:
        seen.append(snap.seq)
        if len(seen) >= 5:
            done.set()

    s.subscribe(bad)
    s.subscribe(good)
    s.start()
    try:
        assert done.wait(WAIT_S)
    finally:
        assert s.stop()
    assert any("widget gone" in e for e in s.errors)


def test_server_provider_marks_our_pids_and_its_failures_are_kept() -> None:
    src = CountingSource()
    views = iter([ServerView(pid=7, extra_pids=frozenset({8})), None])

    def provider() -> ServerView | None:
        return next(views)

    s = GpuSampler(src, server=provider, read_host=False)
    s.sample_now()
    s.sample_now()
    assert src.ours_seen == [frozenset({7, 8}), frozenset()]
    s.sample_now()  # the iterator is exhausted: the provider raises StopIteration
    assert src.ours_seen[-1] == frozenset() and any("server provider failed" in e for e in s.errors)


class GateSource(CountingSource):
    """A source whose pass hangs until released, like NVML on a GPU falling off the bus."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def read(self, ours: Iterable[int] = ()) -> GpuReading:
        if self.k >= 1:
            self.entered.set()
            assert self.gate.wait(WAIT_S)
        return super().read(ours)


def test_a_hanging_pass_never_blocks_readers() -> None:
    src = GateSource()
    s = GpuSampler(src, interval_s=0.001, read_host=False)
    s.start()
    try:
        assert s.wait_for_next(0, WAIT_S) is not None
        assert src.entered.wait(WAIT_S)  # pass 2 is now stuck inside the source
        # Everything a UI thread does still returns, with the last complete snapshot.
        assert s.latest is not None and s.latest.seq == 1 and check_consistent(s.latest) == 1
        unsubscribe = s.subscribe(lambda _: None)
        unsubscribe()
        s.interval_s = 0.5
        assert s.wait_for_next(1, timeout_s=0.01) is None  # bounded, returns
        assert s.stop(timeout_s=0.01) is False  # cannot end while the source hangs, says so
    finally:
        src.gate.set()
        assert s.stop(timeout_s=WAIT_S)


def test_concurrent_readers_see_consistent_unchanging_snapshots() -> None:
    """Reader threads read `latest` while the sampler thread publishes, then re-check old snapshots."""
    s = GpuSampler(CountingSource(devices=4), interval_s=0.001, read_host=False)
    stop_readers = threading.Event()
    errors: list[BaseException] = []
    reads = [0] * 4

    def reader(slot: int) -> None:
        last_seq = 0
        kept: list[tuple[GpuSnapshot, dict[str, object]]] = []
        try:
            for _ in range(10_000_000):  # bounded; normally ended by stop_readers
                if stop_readers.is_set():
                    break
                snap = s.latest
                if snap is None:
                    continue
                assert snap.seq >= last_seq  # never goes back in time
                last_seq = snap.seq
                assert check_consistent(snap) == snap.seq
                reads[slot] += 1
                if len(kept) < 50 and reads[slot] % 7 == 0:
                    kept.append((snap, snap.to_dict()))
            for snap, as_dict in kept:  # published snapshots never change afterwards
                assert snap.to_dict() == as_dict
                check_consistent(snap)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    s.start()
    try:
        assert s.wait_for_next(50, WAIT_S) is not None
    finally:
        stop_readers.set()
        assert s.stop()
        for t in threads:
            t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert all(n > 0 for n in reads)


def test_concurrent_reads_with_nvml_and_processes_churning() -> None:
    """The NVML layer under the sampler while another thread starts and ends GPU processes."""
    fake = FakeNvml([gpu(0), gpu(1)])
    s = GpuSampler(Nvml(fake.module, register_atexit=False), interval_s=0.001, server=ServerView(pid=1))
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        for i in range(10_000_000):
            if stop.is_set():
                return
            with fake.lock:
                procs = fake.gpus[i % 2].compute
                procs.append(FakeProcess(1 + i % 5, 100 + i % 7, "llama-server" if i % 5 == 0 else None))
                if len(procs) > 3:
                    procs.pop(0)

    def read() -> None:
        try:
            for _ in range(10_000_000):
                if stop.is_set():
                    return
                snap = s.latest
                if snap is None:
                    continue
                assert snap.status is Status.OK and len(snap.devices) == 2
                for dev in snap.devices:
                    assert dev.memory_used_mib + dev.memory_free_mib + 250 == dev.memory_total_mib  # type: ignore[operator]
                    pids = [p.pid for p in dev.processes]
                    assert pids == sorted(set(pids))  # merged per pid, sorted
                    assert all(p.is_ours == (p.pid == 1) for p in dev.processes)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    workers = [threading.Thread(target=churn, daemon=True), threading.Thread(target=read, daemon=True)]
    for t in workers:
        t.start()
    s.start()
    try:
        assert s.wait_for_next(40, WAIT_S) is not None
    finally:
        stop.set()
        assert s.stop()
        for t in workers:
            t.join(WAIT_S)
    assert errors == []


def test_simulated_source_under_the_sampler() -> None:
    plan = {"CUDA0": 0.0}
    s = GpuSampler(SimulatedGpus("rtx3060-laptop-6g", lambda: plan), interval_s=3600)
    assert s.sample_now().devices[0].memory_used_mib == 310
    plan["CUDA0"] = 4096.0
    snap = s.sample_now()
    assert snap.devices[0].memory_used_mib == 310 + 4096 and snap.simulated
    assert isinstance(snap.host.ram_total_mib, int)
