"""What llama.cpp actually allocated, parsed from a `llama-server -lv 4 --log-colors off` launch log.

The planner is held against this: weights (model buffers), KV, recurrent state (RS), compute and
output buffers, per buffer and per device, separately for the target context and for the MTP draft
context (everything after `creating MTP draft context` belongs to the draft). A repeated compute line
for the same buffer in the same context replaces the earlier one (llama.cpp re-reserves after
attaching backend samplers); it is not added. Fed one line at a time, so the supervisor can call it
while it reads the log. Also keeps the `common_memory_breakdown_print` tables (fit dry runs, exit)
and their `--log-jsonl` form.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

COMPONENTS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent", "compute", "draft_compute", "output", "draft_output")

_NUM = r"([\d.]+)"
RE_DEVICE = re.compile(r"using device (\S+) \((.*?)\)(?: \((.*?)\))? - (\d+) MiB free")
RE_MODEL = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+" + _NUM + " MiB")
RE_LOAD_START = re.compile(r"load_tensors: loading model tensors")
RE_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
RE_KVBUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+" + _NUM + " MiB")
RE_KV = re.compile(
    r"llama_kv_cache: size =\s+" + _NUM + r" MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\), "
    r"K \((\w+)\):\s+" + _NUM + r" MiB, V \((\w+)\):\s+" + _NUM + " MiB"
)
RE_RSBUF = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+" + _NUM + " MiB")
RE_RS = re.compile(
    r"llama_memory_recurrent: size =\s+" + _NUM + r" MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+) seqs\s+(\d+) rs_seq\)"
)
RE_COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+" + _NUM + " MiB")
RE_COPIES = re.compile(r"sched_reserve: reserve took [\d.]+ ms, sched copies = (\d+)")
RE_OUTPUT = re.compile(r"llama_context:\s+(\S+)\s+output buffer size =\s+" + _NUM + " MiB")
RE_CTX_PARAM = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|kv_unified|n_rs_seq|n_outputs_max|flash_attn)\s+= (\S+)")
RE_CTX_START = re.compile(r"llama_context: constructing llama_context")
RE_PIPELINE = re.compile(r"llama_context: pipeline parallelism enabled")
RE_DRAFT = re.compile(r"creating (?:MTP )?draft context")
RE_FA_ENABLED = re.compile(r"resolve_fused_ops: Flash Attention (enabled|disabled)|Flash Attention was auto, set to (enabled|disabled)")
RE_BREAKDOWN_HEAD = re.compile(r"memory_breakdown_print: \| memory breakdown \[MiB\]")
RE_BREAKDOWN_GPU = re.compile(
    r"memory_breakdown_print: \|\s+- (.+?)\s*\|\s*(\d+) =\s*(\d+) \+ \(\s*(\d+) =\s*(\d+) \+\s*(\d+) \+\s*(\d+)\) \+\s*(-?\d+)\s*\|"
)
RE_BREAKDOWN_OTHER = re.compile(r"memory_breakdown_print: \|\s+- (.+?)\s*\|\s*(\d+) =\s*(\d+) \+\s*(\d+) \+\s*(\d+)\s*\|")
#: -lv 5: load_tensors' placement of each block (the output layer as block n_layer) and of each -ot match
RE_LAYER_DEV = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?), is_swa")
RE_OVERRIDE = re.compile(r"tensor (\S+) \(\d+ MiB \S+\) buffer type overridden to (\S+)")
RE_EXTRA_MODEL = re.compile(r"getting device memory data for the extra model")
RE_EXIT = re.compile(r"cleaning up before exit")
_PREFILTER = re.compile(r"MiB|llama_context|draft context|sched|load_tensors|breakdown|extra model|before exit|Flash Attention|overridden")


def device_of(buffer: str) -> str:
    """The device a buffer lives on: host buffers (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host, ...) -> `Host`.

    Remote RPC buffers keep their full name (`RPC0[host:port]`): every rpc-server calls itself RPC0,
    the endpoint is what tells them apart.
    """
    if buffer.startswith("CPU") or buffer.endswith("_Host") or buffer == "Host":
        return "Host"
    return buffer


@dataclass
class KvLine:
    size_mib: float
    cells: int
    layers: int
    seqs: int
    streams_of: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float


@dataclass
class ContextReport:
    """One llama_context (target or MTP draft): its parameters and the buffers it allocated."""

    params: dict[str, str] = field(default_factory=dict)
    kv: dict[str, float] = field(default_factory=dict)  # buffer -> MiB
    kv_lines: list[KvLine] = field(default_factory=list)
    recurrent: dict[str, float] = field(default_factory=dict)
    rs_rows: int | None = None  # cells x (1 + rs_seq)
    rs_seq: int | None = None
    compute: dict[str, float] = field(default_factory=dict)  # last value per buffer wins
    output: dict[str, float] = field(default_factory=dict)
    sched_copies: int | None = None
    pipeline_parallel: bool = False
    flash_attn: bool | None = None

    def param_int(self, name: str) -> int | None:
        v = self.params.get(name)
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None


@dataclass
class BreakdownRow:
    name: str  # "Host", "CUDA0 (RTX 4090)", "RPC0 (...)"
    self_mib: int
    model_mib: int
    context_mib: int
    compute_mib: int
    total_mib: int | None = None
    free_mib: int | None = None
    unaccounted_mib: int | None = None


@dataclass
class BreakdownTable:
    phase: str  # "fit" (dry run of the target), "fit-extra" (the MTP/draft context), "exit"
    rows: list[BreakdownRow] = field(default_factory=list)


@dataclass
class MemoryReport:
    """Incremental parser state; call `feed(line)` for each log line, read the dicts at any time."""

    weights: dict[str, float] = field(default_factory=dict)  # buffer -> MiB (summed over files)
    devices: list[dict[str, Any]] = field(default_factory=list)
    offloaded: tuple[int, int] | None = None
    target: ContextReport = field(default_factory=ContextReport)
    draft: ContextReport | None = None
    breakdowns: list[BreakdownTable] = field(default_factory=list)
    layer_device: dict[int, str] = field(default_factory=dict)  # block -> device llama.cpp assigned it to
    buft_overrides: dict[str, str] = field(default_factory=dict)  # tensor -> buffer type an -ot gave it
    lines_matched: int = 0
    _ctx_count: int = 0
    _in_draft: bool = False
    _loaded: bool = False
    _next_table_phase: str = "fit"

    @property
    def current(self) -> ContextReport:
        if self._in_draft:
            if self.draft is None:
                self.draft = ContextReport()
            return self.draft
        return self.target

    def feed(self, line: str) -> bool:
        """Parse one log line; True when it carried memory information."""
        if "{" in line[:2] and "fit_memory_breakdown" in line:
            return self._feed_json(line)
        if not _PREFILTER.search(line):
            return False
        hit = self._feed(line)
        if hit:
            self.lines_matched += 1
        return hit

    def feed_text(self, text: str) -> "MemoryReport":
        for line in text.splitlines():
            self.feed(line)
        return self

    def _feed(self, line: str) -> bool:
        m = RE_MODEL.search(line)
        if m:
            self.weights[m.group(1)] = self.weights.get(m.group(1), 0.0) + float(m.group(2))
            self._loaded = True
            return True
        if RE_LOAD_START.search(line):
            # a new model load: forget buffers of an earlier one in the same stream
            self.weights.clear()
            self.layer_device.clear()
            self.buft_overrides.clear()
            self.target = ContextReport()
            self.draft = None
            self._in_draft = False
            self._ctx_count = 0
            return True
        m = RE_LAYER_DEV.search(line)
        if m:
            self.layer_device[int(m.group(1))] = m.group(2)
            return True
        m = RE_OVERRIDE.search(line)
        if m:
            self.buft_overrides[m.group(1)] = m.group(2)
            return True
        m = RE_DEVICE.search(line)
        if m:
            self.devices.append({"name": m.group(1), "description": m.group(2), "id": m.group(3), "free_mib": int(m.group(4))})
            return True
        m = RE_OFFLOADED.search(line)
        if m:
            self.offloaded = (int(m.group(1)), int(m.group(2)))
            return True
        if RE_DRAFT.search(line):
            self._in_draft = True
            self.draft = ContextReport()
            return True
        if RE_CTX_START.search(line):
            self._ctx_count += 1
            return True
        m = RE_CTX_PARAM.search(line)
        if m:
            self.current.params[m.group(1)] = m.group(2)
            return True
        m = RE_OUTPUT.search(line)
        if m:
            self.current.output[m.group(1)] = float(m.group(2))
            return True
        m = RE_KVBUF.search(line)
        if m:
            # iswa/DSA caches print one buffer line per sub-cache: they add up
            self.current.kv[m.group(1)] = self.current.kv.get(m.group(1), 0.0) + float(m.group(2))
            return True
        m = RE_KV.search(line)
        if m:
            g = m.groups()
            self.current.kv_lines.append(KvLine(float(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5], float(g[6]), g[7], float(g[8])))
            return True
        m = RE_RSBUF.search(line)
        if m:
            self.current.recurrent[m.group(1)] = float(m.group(2))
            return True
        m = RE_RS.search(line)
        if m:
            cells, seq = int(m.group(2)), int(m.group(5))
            self.current.rs_rows = cells * (1 + seq)
            self.current.rs_seq = seq
            return True
        m = RE_COMPUTE.search(line)
        if m:
            self.current.compute[m.group(1)] = float(m.group(2))  # replaces, never adds
            return True
        m = RE_COPIES.search(line)
        if m:
            self.current.sched_copies = int(m.group(1))
            return True
        if RE_PIPELINE.search(line):
            self.current.pipeline_parallel = True
            return True
        m = RE_FA_ENABLED.search(line)
        if m:
            self.current.flash_attn = (m.group(1) or m.group(2)) == "enabled"
            return True
        if RE_EXTRA_MODEL.search(line):
            self._next_table_phase = "fit-extra"
            return True
        if RE_EXIT.search(line):
            self._next_table_phase = "exit"
            return True
        if RE_BREAKDOWN_HEAD.search(line):
            phase = self._next_table_phase
            self.breakdowns.append(BreakdownTable(phase))
            if phase == "fit-extra":
                self._next_table_phase = "fit"
            return True
        m = RE_BREAKDOWN_GPU.search(line)
        if m and self.breakdowns:
            g = m.groups()
            self.breakdowns[-1].rows.append(BreakdownRow(
                g[0], int(g[3]), int(g[4]), int(g[5]), int(g[6]), total_mib=int(g[1]), free_mib=int(g[2]), unaccounted_mib=int(g[7])))
            return True
        m = RE_BREAKDOWN_OTHER.search(line)
        if m and self.breakdowns:
            g = m.groups()
            self.breakdowns[-1].rows.append(BreakdownRow(g[0], int(g[1]), int(g[2]), int(g[3]), int(g[4])))
            return True
        return False

    def _feed_json(self, line: str) -> bool:
        try:
            obj = json.loads(line)
        except ValueError:
            return False
        if obj.get("type") != "fit_memory_breakdown":
            return False
        table = BreakdownTable(self._next_table_phase)
        for r in obj.get("data", {}).get("rows", []):
            name = r.get("name", "?")
            if r.get("kind") == "device" and r.get("description"):
                name = f"{name} ({r['description']})"
            table.rows.append(BreakdownRow(
                name, int(r.get("self", 0)), int(r.get("model", 0)), int(r.get("context", 0)), int(r.get("compute", 0)),
                total_mib=r.get("total"), free_mib=r.get("free"), unaccounted_mib=r.get("unaccounted")))
        self.breakdowns.append(table)
        if table.phase == "fit-extra":
            self._next_table_phase = "fit"
        self.lines_matched += 1
        return True

    # ---- views ---------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True once the target context has reported a compute buffer (the load got that far)."""
        return bool(self.target.compute)

    def per_device(self) -> dict[str, dict[str, float]]:
        """device -> component -> MiB, components as in COMPONENTS (draft parts kept apart)."""
        out: dict[str, dict[str, float]] = {}

        def add(buf: str, comp: str, mib: float) -> None:
            d = out.setdefault(device_of(buf), {c: 0.0 for c in COMPONENTS})
            d[comp] = round(d[comp] + mib, 2)

        for b, v in self.weights.items():
            add(b, "weights", v)
        t = self.target
        for b, v in t.kv.items():
            add(b, "kv", v)
        for b, v in t.recurrent.items():
            add(b, "recurrent", v)
        for b, v in t.compute.items():
            add(b, "compute", v)
        for b, v in t.output.items():
            add(b, "output", v)
        if self.draft is not None:
            d = self.draft
            for b, v in d.kv.items():
                add(b, "draft_kv", v)
            for b, v in d.recurrent.items():
                add(b, "recurrent", v)
            for b, v in d.compute.items():
                add(b, "draft_compute", v)
            for b, v in d.output.items():
                add(b, "draft_output", v)
        return out

    def totals(self) -> dict[str, float]:
        tot = {c: 0.0 for c in COMPONENTS}
        for comps in self.per_device().values():
            for c, v in comps.items():
                tot[c] = round(tot[c] + v, 2)
        return tot

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": self.per_device(),
            "totals": self.totals(),
            "weights_buffers": dict(self.weights),
            "target": _ctx_dict(self.target),
            "draft": _ctx_dict(self.draft) if self.draft else None,
            "breakdowns": [{"phase": t.phase, "rows": [r.__dict__ for r in t.rows]} for t in self.breakdowns],
        }


def _ctx_dict(c: ContextReport) -> dict[str, Any]:
    return {
        "params": dict(c.params), "kv": dict(c.kv), "recurrent": dict(c.recurrent), "compute": dict(c.compute),
        "output": dict(c.output), "rs_rows": c.rs_rows, "sched_copies": c.sched_copies,
        "pipeline_parallel": c.pipeline_parallel, "kv_lines": [k.__dict__ for k in c.kv_lines],
    }


def parse_log(text: str) -> MemoryReport:
    """Parse a whole launch log at once."""
    return MemoryReport().feed_text(text)
