"""The searches as actions against the real llama-server on CPU: the largest context (planned, then
confirmed by a launch, stepping down when the launch runs out of memory) and the smallest
--fit-target that survives a first decode on an RPC device under an address-space limit.

The "device" memory is made scarce for real, as in tests/test_sweep_real.py: llama-server under
`ulimit -v` (host allocations) and a ggml-rpc-server under RLIMIT_AS (device allocations).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_sweep_real import _vm_peak_kb, base, limited_rpc_server  # noqa: F401 (a fixture)
from tui.core.options.settings import Settings
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.planning.largest_ctx import CTX_STEP
from tui.core.demo.tiny_model import preset, write_tiny_model
from tui.core.lab.events import LabEvent
from tui.core.lab.knobs import largest_ctx, plan_largest_ctx, smallest_fit_target

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def long_ctx_model(tmp_path: Path) -> Path:
    return write_tiny_model(tmp_path / "long-ctx.gguf", preset("tiny-mtp", ctx=262144, head_dim=64))


def test_the_plan_is_the_largest_context_the_planner_fits(long_ctx_model: Path) -> None:
    meta = read_gguf(long_ctx_model)
    s = base(long_ctx_model, spec_type=["draft-mtp"])
    need_4k = plan(meta, replace(s, ctx_size=4096), []).devices[-1].needed_mib
    need_full = plan(meta, replace(s, ctx_size=262144), []).devices[-1].needed_mib
    free = (need_4k + need_full) / 2  # host memory halfway: some context between fits
    ctx, seen = plan_largest_ctx(meta, s, [], host_total_mib=free, host_free_mib=free)
    assert ctx is not None and 4096 < ctx < 262144 and ctx % CTX_STEP == 0
    assert plan(meta, replace(s, ctx_size=ctx), [], free, free).worst_risk != "oom"
    assert plan(meta, replace(s, ctx_size=ctx + CTX_STEP), [], free, free).worst_risk == "oom"
    assert len(seen) <= 14  # a binary search over 1024 blocks, not a scan
    full, _ = plan_largest_ctx(meta, s, [], upper=8192)  # host memory unknown: everything fits
    assert full == 8192


def test_largest_ctx_confirms_the_plan_with_a_launch(server_bin: Path, long_ctx_model: Path) -> None:
    events: list[LabEvent] = []
    r = largest_ctx(base(long_ctx_model, spec_type=["draft-mtp"]), upper=16384, server_bin=server_bin,  # this machine
                    on_event=events.append)
    assert r.found and r.value == r.planned == 16384, r.message
    assert [(t.value, t.outcome) for t in r.trials] == [(16384, "ok")]
    assert r.settings is not None and r.settings.ctx_size == 16384 and r.settings.spec_type == ["draft-mtp"]
    kinds = [e.kind for e in events]
    assert kinds[0] == "plan" and "trial" in kinds and kinds[-1] == "finished"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limits via /proc and ulimit -v")
def test_largest_ctx_steps_down_when_the_planned_context_runs_out(server_bin: Path, long_ctx_model: Path,
                                                                  tmp_path: Path) -> None:
    # The planner is not told about the limit (host memory unknown), so it plans the full context;
    # llama-server runs under `ulimit -v` halfway between what it maps at 4k and at 262144 tokens.
    s = base(long_ctx_model, ctx_size=262144, spec_type=["draft-mtp"])
    small = _vm_peak_kb(server_bin, replace(s, ctx_size=4096))
    full = _vm_peak_kb(server_bin, s)
    limit_kb = (small + full) // 2
    wrapper = tmp_path / "limited-llama-server"
    wrapper.write_text(f"#!/bin/sh\nulimit -v {limit_kb}\nexec '{server_bin}' \"$@\"\n")
    wrapper.chmod(0o755)
    r = largest_ctx(s, [], server_bin=wrapper)
    print(f"largest ctx under ulimit -v {limit_kb}: {r.message}; trials {[(t.value, t.outcome) for t in r.trials]}")
    assert r.planned == 262144 and r.found, r.message
    by_value = {t.value: t.outcome for t in r.trials}
    assert by_value[262144] == "oom" and by_value[r.value] == "ok"
    assert by_value.get(r.value + CTX_STEP) == "oom"  # converged to one block
    assert r.settings is not None and r.settings.ctx_size == r.value and 4096 <= r.value < 262144  # type: ignore[operator]


def test_smallest_fit_target_on_a_real_rpc_allocation_failure(server_bin: Path, limited_rpc_server: str,  # noqa: F811
                                                              long_ctx_model: Path) -> None:
    s = Settings(model=str(long_ctx_model), parallel=1, threads=1, threads_batch=1, rpc=[limited_rpc_server],
                 n_gpu_layers="all", spec_type=["draft-mtp"])
    events: list[LabEvent] = []
    up = smallest_fit_target(s, server_bin=server_bin, on_event=events.append)
    print(f"from 1024 MiB: {up.message}; trials {[(t.value, t.outcome) for t in up.trials]}")
    assert up.found and up.value is not None, up.message
    assert up.trials[0].value == 1024 and up.trials[0].outcome == "oom"  # the default fails: search upward
    by_value = {t.value: t.outcome for t in up.trials}
    assert by_value.get(up.value, "ok") == "ok"
    assert by_value.get(up.value - 64) == "oom" or up.value - 64 == 1024 or by_value.get(up.value - 64) is None \
        and up.finding is not None and up.finding.start == up.value - 64
    assert up.settings is not None and up.settings.fit_target == [up.value] and up.settings.rpc == s.rpc
    assert sum(e.kind == "trial" for e in events) == len(up.trials)
    # From a value that works, the search comes down to the same bound (to one step).
    down = smallest_fit_target(replace(s, fit_target=[up.value + 4 * 64]), server_bin=server_bin)
    print(f"from {up.value + 256} MiB: {down.message}; trials {[(t.value, t.outcome) for t in down.trials]}")
    assert down.found and down.value is not None and abs(down.value - up.value) <= 64, down.message
    assert down.trials[0].outcome == "ok" and down.trials[1].value == up.value + 3 * 64  # one step down first
    assert len(down.trials) < len(up.trials) + 4  # gallops down from the working value, not up from 0


def test_cancel_stops_a_search(server_bin: Path, long_ctx_model: Path) -> None:
    cancel = threading.Event()

    def on_event(e: LabEvent) -> None:
        if e.kind == "launching":
            cancel.set()  # as a UI thread would, while the first launch is starting

    r = largest_ctx(base(long_ctx_model, spec_type=["draft-mtp"]), [], upper=8192, server_bin=server_bin,
                    on_event=on_event, cancel=cancel)
    assert r.cancelled and not r.found and r.message == "search cancelled."
