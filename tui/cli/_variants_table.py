"""What `mtp-tune variants` prints: a plain-text or Markdown table of a repo's quants."""

from __future__ import annotations

from typing import Any


def _gib(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024:.1f}"


def _device_cell(d: Any) -> str:
    head = d.headroom_mib
    return f"{_gib(d.needed_mib)} ({'' if head is None else '+' if head >= 0 else '-'}{_gib(abs(head)) if head is not None else '?'})"


def rows_of(table: Any) -> tuple[list[str], list[list[str]]]:
    """(header, cells) for the table; device columns follow the first planned row's devices."""
    first = next((r.shown for r in table.rows if r.shown is not None), None)
    devs = [d.name for d in first.devices] if first is not None else []
    head = ["quant", "file", "size GiB", "KV", *[f"{n} need (left) GiB" for n in devs], "fits", "max -c", "fit would"]
    out = []
    for r in table.rows:
        p = r.shown
        cells = [r.variant.tag or "-", r.variant.path + (f" (+{len(r.variant.files) - 1} parts)" if len(r.variant.files) > 1 else ""),
                 f"{r.variant.size / 2**30:.2f}", r.kv or "(flags)"]
        if p is None:
            cells += ["-" for _ in devs] + ["error", "-", r.error[:120]]
        else:
            cells += [_device_cell(d) for d in p.devices][: len(devs)] + ["-"] * max(0, len(devs) - len(p.devices))
            verdict = "yes" if r.fits else "no"
            cells += [verdict + (" (exact)" if r.source == "exact" else ""),
                      "-" if r.max_ctx is None else str(r.max_ctx), r.fit_choice or ""]
        out.append(cells)
    return head, out


def render(table: Any, devices: Any, markdown: bool = False) -> str:
    head, rows = rows_of(table)
    title = (f"{table.repo} @ {table.commit[:10]}: {len(rows)} row(s) on {devices.source or 'this machine'}; "
             f"headers only: {table.traffic.bytes / 2**20:.1f} MiB in {table.traffic.requests} range requests")
    if markdown:
        lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    lines = [title, ""]
    for r in [head, *rows]:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    lines += ["", "need (left): what the device needs and what it would have left; max -c: the largest context that "
              "fits with every layer where the flags put it; fit would: what --fit on changes to make it fit."]
    return "\n".join(lines)
