"""The largest context the planner does not predict to OOM: a binary search over whole 256-cell blocks.

Instant (the estimate), so the variants table gives one per quant and the largest-context search
(`lab.knobs.largest_ctx`) starts from it before confirming with a launch. The search stops at
the model's training context (`ctx_limit`): llama-server's own `-c 0`, and the most a model is
trained to attend to, so "the largest -c" never means "a context the model cannot use".
"""

from __future__ import annotations

from dataclasses import replace

from tui.core.options.settings import Settings
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import DEFAULT_CTX_NO_TRAIN, resolve
from tui.core.planning.result import Plan

#: The context is allocated in cells padded to 256 (llama-context.cpp:292): finer steps change nothing.
CTX_STEP = 256
MIN_CTX = 256


def ctx_limit(meta: GGUFMeta, settings: Settings) -> int:
    """The search's upper bound: the training context per sequence (times the streams when each
    slot has its own KV, as llama-server's `-c 0` resolves), in whole 256-cell blocks."""
    train = meta.hparams.n_ctx_train or DEFAULT_CTX_NO_TRAIN
    streams = resolve(replace(settings, ctx_size=CTX_STEP), meta.hparams).n_stream
    return max(CTX_STEP, train * streams // CTX_STEP * CTX_STEP)


def keeps_margin(p: Plan) -> bool:
    """What `--fit on` checks before it changes anything (fit.py `_fits`): every offload device keeps
    its --fit-target margin (the host only when it is the only device), and nothing runs out."""
    offload = [d for d in p.devices if d.key != HOST] or p.devices
    return p.worst_risk != "oom" and all(d.headroom_mib is None or d.headroom_mib >= d.margin_mib for d in offload)


def plan_largest_ctx(meta: GGUFMeta, settings: Settings, devices: list[DeviceSpec], *,
                     host_total_mib: float | None = None, host_free_mib: float | None = None,
                     upper: int | None = None, keep_margin: bool = False) -> tuple[int | None, list[tuple[int, str]]]:
    """The largest context (whole 256-cell blocks, at most `upper` or `ctx_limit`) the planner does not
    predict to OOM, and the (ctx, risk) pairs it looked at: a binary search, since memory grows with
    the context. `keep_margin`: every layer stays where the settings put it and the --fit-target
    margin is kept (`keeps_margin`), i.e. the largest -c that `--fit on` loads without moving anything;
    otherwise the plan is taken as the settings make it (fit applied when on)."""
    from tui.core.planning.plan import plan

    hi_blocks = max(1, int(upper or ctx_limit(meta, settings)) // CTX_STEP)
    seen: list[tuple[int, str]] = []

    def fits(blocks: int) -> bool:
        ctx = blocks * CTX_STEP
        p = plan(meta, replace(settings, ctx_size=ctx), devices, host_total_mib, host_free_mib, apply_fit=not keep_margin)
        seen.append((ctx, p.worst_risk))
        return keeps_margin(p) if keep_margin else p.worst_risk != "oom"

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
