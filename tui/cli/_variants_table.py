"""What `mtp-tune variants` prints: a plain-text or Markdown table of a repo's quants, and its legend.

Sizes in GiB (what a download and a device are measured in), one "need (left)" cell per device, so
a row reads as "this file needs 11.6 GiB on CUDA0 and leaves 4.4"; the legend says what every
column means, since "max -c" and "fit would" are easy to misread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tui.cli._common import counted
from tui.core.planning.devices import HOST
from tui.core.config.text import safe_text
from tui.core.quality.index import quality_cell

GIB_MIB = 1024.0


def gib(mib: float | None) -> str:
    """GiB with one decimal; under 1 GiB with two significant digits (a small model is not `0.0`)."""
    if mib is None:
        return "-"
    v = mib / GIB_MIB
    return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"


#: the mapped part of the host's need is named in its cell from this much on (0.1 GiB)
MAPPED_SHOWN_MIB = 0.1 * GIB_MIB


def device_cell(d: Any, mapped_mib: float = 0.0) -> str:
    """`need (left)` in GiB: `11.6 (+4.4)`; a device that runs out shows `-0.7`; unknown free: `?`;
    the host's need with mapped file in it (`VariantRow.mapped_mib`): `27.5 (+32.5; 26.9 mapped)`."""
    head = d.headroom_mib
    left = "?" if head is None else f"{'+' if head >= 0 else '-'}{gib(abs(head))}"
    mapped = f"; {gib(mapped_mib)} mapped" if mapped_mib >= MAPPED_SHOWN_MIB else ""
    return f"{gib(d.needed_mib)} ({left}{mapped})"


def short_flags(flags: Sequence[str]) -> str:
    """fit's choice for a table cell: every flag, but `-ot` as how many tensor overrides it holds."""
    out: list[str] = []
    it = iter(flags)
    for f in it:
        v = next(it, "")
        out.append(f"-ot ({counted(len(v.split(',')), 'override')})" if f == "-ot" else f"{f} {v}")
    return " ".join(out)


def max_ctx_cell(r: Any) -> str:
    if r.max_ctx is None:
        return "-" if r.plan is None else "none"
    return f"{r.max_ctx} (max)" if r.max_ctx_limit is not None and r.max_ctx >= r.max_ctx_limit else str(r.max_ctx)


def fits_cell(r: Any) -> str:
    """The row's tier: `yes`, `yes (tight)`, `with fit`, `no` (`, exact` inside the brackets when measured)."""
    tier = r.tier
    if tier == "error":
        return "error"
    notes = (["tight"] if r.tight else []) + (["exact"] if r.source == "exact" else [])
    return tier + (f" ({', '.join(notes)})" if notes else "")


def rows_of(table: Any, measured: Sequence[Any] = ()) -> tuple[list[str], list[list[str]]]:
    """(header, cells); device columns follow the first planned row's devices (every row plans on the same)."""
    first = next((r.shown for r in table.rows if r.shown is not None), None)
    devs = [d.key for d in first.devices] if first is not None else []
    head = ["quant", "file", "GiB", "KV", "KV KLD", "at -c", *[f"{k} need (left)" for k in devs], "fits", "max -c",
            "fit would"]
    out = []
    quality = list(measured) or [None] * len(table.rows)
    for r, m in zip(table.rows, quality):
        v = r.variant
        name = v.path.rsplit("/", 1)[-1] + (f" +{counted(len(v.files) - 1, 'part')}" if len(v.files) > 1 else "")
        cells = [v.tag or "-", name, gib(v.size / 2**20), r.kv_types, quality_cell(m)]
        p = r.shown
        if p is None or r.error:
            cells += ["-"] + ["-" for _ in devs] + ["error", "-", (r.error or "not planned").split("\n")[0][:100]]
        else:
            by_key = {d.key: d for d in p.devices}
            mapped = r.mapped_mib
            cells += [str(r.ctx or "-")] + [device_cell(by_key[k], mapped if k == HOST else 0.0) if k in by_key else "-"
                                            for k in devs]
            would = short_flags(r.fit_flags) or ("cannot fit" if r.fit_gives_up else "")
            cells += [fits_cell(r), max_ctx_cell(r), would]
        out.append([safe_text(c) for c in cells])  # file names, tags and errors come from the Hub
    return head, out


def legend(table: Any) -> list[str]:
    """One line per column that needs words; the max -c limit named from the first planned row."""
    limit = next((r.max_ctx_limit for r in table.rows if r.max_ctx_limit), None)
    exact = any(r.source == "exact" for r in table.rows)
    mapped = any(r.mapped_mib >= MAPPED_SHOWN_MIB for r in table.rows)
    return [
        "GiB: the file's size (a split set: all its parts). KV: the main KV type (-ctk/-ctv); the draft KV is as the flags say.",
        "KV KLD: what the row's K/V types cost in output quality on this file against f16 K/V, as `mtp-tune quality` "
        "measured it (mean KL divergence · same top token %); blank: not measured, nothing is guessed.",
        "at -c: the context the row is planned at (the flags' -c, or what --fit would reduce it to).",
        "need (left): GiB the device needs, and what it has left (+) or lacks (-)" + (
            "; Host `N mapped`: of its need, N GiB is the model file mapped (mmap) between the host's own tensors, "
            "holding other devices' weights: llama.cpp maps it as one CPU_Mapped buffer, but nothing reads it after the load "
            "(page cache the system can drop)." if mapped else "."),
        "fits: yes: loads as the flags put it, --fit changes nothing (tight: inside the --fit-target margin); "
        "with fit: loads only because --fit on makes the changes in the `fit would` column (experts or layers to the host, a smaller -c); "
        "no: a device runs out of memory even so" + ("; exact: llama.cpp's own dry run measured the row." if exact else "."),
        "max -c: the largest -c that loads with every layer where the flags put it (with --fit on: fit keeps its "
        f"margin and moves nothing), whatever -c the row is planned at; searched up to the model's training context"
        + (f" ({limit})" if limit else "") + ", shown `(max)` when reached; none: not even 256." + (
            " Always the estimate." if exact else ""),
        "fit would: what --fit on changes so the row loads (-c, -ncmoe, -ngl, -ts, -ot), as flags; "
        "cannot fit: fit gives up and loads as given.",
        *_sidecar_notes(table),
    ]


def _sidecar_notes(table: Any) -> list[str]:
    """What llama-server's -hf downloads beside the rows' files (a projector, a draft sidecar), once each."""
    from tui.cli._plan_table import sidecar_line

    seen: dict[str, Any] = {}
    for r in table.rows:
        for c in r.sidecars:
            seen.setdefault(c.path, c)
    return [f"with -hf: {sidecar_line(c)}" for c in seen.values()]  # sidecar_line shows the name escaped


def title(table: Any, devices: Any, flags: Sequence[str] = ()) -> str:
    devs = ", ".join(f"{d.key} {gib(d.free_mib)}" for d in devices.devices) or "no GPU"
    host = f"; host {gib(devices.host_free_mib)} GiB free" if devices.host_free_mib is not None else ""
    return (f"{safe_text(table.repo)} @ {safe_text(table.commit[:10])} on {devices.source or 'this machine'} ({devs} GiB free{host})"
            + (f"; flags: {' '.join(flags)}" if flags else "")
            + f"; headers only: {table.traffic.bytes / 2**20:.1f} MiB in {counted(table.traffic.requests, 'range request')}")


def render(table: Any, devices: Any, markdown: bool = False, flags: Sequence[str] = (),
           measured: Sequence[Any] = ()) -> str:
    """The table (`measured`: `quality.index.measured_rows(table.rows)`, the KV KLD column's figures) and its legend."""
    head, rows = rows_of(table, measured)
    top = title(table, devices, flags)
    notes = legend(table)
    if markdown:
        esc = lambda c: c.replace("|", "\\|")  # noqa: E731
        lines = [f"**{esc(top)}**", "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
        return "\n".join([*lines, "", *[f"- {esc(n)}" for n in notes]])
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    lines = [top, ""]
    for r in [head, *rows]:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join([*lines, "", *notes])
