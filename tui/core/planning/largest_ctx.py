"""The largest context the planner does not predict to OOM: a binary search over whole 256-cell blocks.

Instant (the estimate), so the variants table gives one per quant and the largest-context search
(`tuning.searches.largest_ctx`) starts from it before confirming with a launch.
"""

from __future__ import annotations

from dataclasses import replace

from tui.core.options.settings import Settings
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.gguf_meta import GGUFMeta

#: The context is allocated in cells padded to 256 (llama-context.cpp:292): finer steps change nothing.
CTX_STEP = 256
MIN_CTX = 256


def plan_largest_ctx(meta: GGUFMeta, settings: Settings, devices: list[DeviceSpec], *,
                     host_total_mib: float | None = None, host_free_mib: float | None = None,
                     upper: int | None = None) -> tuple[int | None, list[tuple[int, str]]]:
    """The largest context (whole 256-cell blocks, at most `upper` or the training context) the
    planner does not predict to OOM, and the (ctx, risk) pairs it looked at: a binary search, since
    memory grows with the context."""
    from tui.core.planning.plan import plan

    hi_blocks = max(1, int(upper or meta.hparams.n_ctx_train or 4096) // CTX_STEP)
    seen: list[tuple[int, str]] = []

    def fits(blocks: int) -> bool:
        ctx = blocks * CTX_STEP
        risk = plan(meta, replace(settings, ctx_size=ctx), devices, host_total_mib, host_free_mib).worst_risk
        seen.append((ctx, risk))
        return risk != "oom"

    if fits(hi_blocks):
        return hi_blocks * CTX_STEP, seen
    lo = MIN_CTX // CTX_STEP
    if not fits(lo):
        return None, seen
    hi = hi_blocks  # fits(lo) and not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * CTX_STEP, seen
