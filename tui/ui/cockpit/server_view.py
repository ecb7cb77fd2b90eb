"""Supervisor / Attachment -> ServerStatus, and what the sampler needs to know about our server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tui.core.gpu.types import ServerView
from tui.core.server.failures import strip_prefix
from tui.core.server.handle import RunningSettings, ServerHandle
from tui.ui.cockpit.views import PlanView, ReconcileRow, ServerStatus

TAIL = 5


def running_text(rs: RunningSettings | None) -> str:
    """What an attached server says it runs, each unknown marked unknown (it is never the form's)."""
    if rs is None:
        return "runs (read from the server): not asked yet"
    unknown = "unknown"
    if rs.mtp is None:
        spec = f"MTP {unknown}"
    elif not rs.mtp:
        spec = "no MTP (spec-type none)"
    else:
        n_max = str(rs.n_max) if rs.n_max is not None else f"{unknown} until a speculative request ran"
        spec = f"spec-type draft-mtp, n-max {n_max}"
    model = Path(rs.model).name if rs.model else unknown
    parts = [spec, f"ctx {rs.ctx if rs.ctx is not None else unknown}",
             f"slots {rs.slots if rs.slots is not None else unknown}", f"model {model}"]
    return "runs (read from the server): " + " · ".join(parts)


def status_of(handle: ServerHandle | None, *, attached: bool, reconcile: tuple[ReconcileRow, ...] = (),
              running: RunningSettings | None = None) -> ServerStatus:
    """The panel's view of a Supervisor or an Attachment (None: nothing started yet); `running` is
    what an attached server told it runs."""
    if handle is None:
        return ServerStatus(state="stopped", attached=attached)
    state = handle.state.value
    failure = handle.failure
    explained = failure.explain() if failure is not None and state in ("failed", "exited") else None
    path = handle.log_path
    return ServerStatus(
        state=state,
        url=handle.base_url if state not in ("stopped",) else None,
        pid=handle.pid if handle.state.running else None,
        attached=attached,
        failure=explained,
        log_tail=tuple(strip_prefix(line) for line in handle.tail(TAIL)),
        log_path=str(path) if path else None,
        reconcile=reconcile if state == "ready" else (),
        running=running_text(running) if attached else "",
    )


def for_sampler(pid: int, memory: dict[str, Any] | None, plan: PlanView | None) -> ServerView:
    """Our pid (so its GPU memory is not flagged as foreign) and its model buffers (spill warning)."""
    buffers = (memory or {}).get("weights_buffers") or {}
    expected_host = plan.host.weights_mib if plan is not None and plan.host is not None else None
    return ServerView(pid=pid, model_buffers_mib=dict(buffers), expected_host_mib=expected_host)


def simulated_allocation(memory: dict[str, Any] | None, plan: PlanView | None) -> dict[int, float] | None:
    """What the running server allocated, per simulated device, for the "used" bars.

    A GPU server reports per device (CUDA0...): used as is. The demo's CPU server reports everything
    on the host; then the reported total is spread over the simulated devices in the plan's
    proportions, so the bars show what this configuration would take on the card (labelled simulated).
    """
    if not memory:
        return None
    devices: dict[str, dict[str, float]] = memory.get("devices") or {}
    per_device = {name: sum(comps.values()) for name, comps in devices.items() if name != "Host"}
    if per_device:
        return dict(per_device)  # type: ignore[arg-type]
    host_total = sum((devices.get("Host") or {}).values())
    if not host_total or plan is None or not plan.devices:
        return None
    needed = [max(0.0, d.needed_mib) for d in plan.devices]
    total = sum(needed) or 1.0
    return {i: host_total * n / total for i, n in enumerate(needed)}
