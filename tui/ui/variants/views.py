"""What the variants picker draws: one row per quant and KV type, and the table around them, built
from the core's `VariantsTable` (`view_of`) in the CLI's words (`mtp-tune variants`: device keys,
GiB, `none` / `N (max)`), narrowed to fit a 120-column terminal: the file only where the tag does not
say it, each row's full file name in its `detail`. Plain data: the screen and snapshot tests only read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tui.core.options import reader
from tui.core.options.settings import Settings
from tui.core.quality.index import RowQuality, quality_cell

#: what the cells mean, under the table (the CLI's legend, short)
LEGEND = ("GiB throughout. KV KLD: what the K/V types cost in quality on this file as `mtp-tune quality` measured it "
          "(mean KL divergence; `mtp-tune variants` adds the same top token %); blank: not measured, nothing is guessed. "
          "need (left): what the device needs, and has left (+) or lacks (-). max -c: the largest -c "
          "that loads with nothing moved by fit; (max): the training context; none: not even 256.")
#: a file cell longer than this is cut (the detail line under the table names it in full)
FILE_CELL = 28



@dataclass(frozen=True)
class VariantLine:
    """One row of the picker: its cells, what Enter puts in the form, and its detail line."""

    cells: tuple[str, ...]
    fits: bool
    error: str
    hf_repo: str  # REPO:TAG, or REPO when `hf_file` names the file
    hf_file: str  # "" when the tag picks exactly this file (llama.cpp's own rule)
    kv: str | None
    tag: str
    path: str
    fetched: Any = None  # the header copy (tui.core.remote.fetch.Fetched), so the chosen plan asks nothing
    tier: str = ""  # "yes" | "with fit" | "no" | "error" (tui.core.remote.variants.VariantRow.tier)
    detail: str = ""  # the full file name, the row's -c, what Enter puts in the form (shown for the highlighted row)


@dataclass(frozen=True)
class VariantsView:
    """What the picker shows: a status line, the columns and the rows (best first), the notes under
    the table (the -hf sidecars, what the cells mean), or an error."""

    repo: str
    status: str = ""
    error: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[VariantLine, ...] = ()
    done: bool = False
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> int | None:
        """The row to highlight: the first one that fits (rows come best first), else None."""
        return next((i for i, r in enumerate(self.rows) if r.fits), None)


def choice_for(repo: str, files: list[Any], variant: Any) -> tuple[str, str]:
    """(hf-repo, -hff) that make llama-server download exactly `variant`: `REPO:TAG` when its tag
    picks this file by llama.cpp's rules (`hub.resolve_files`), else `REPO` plus `-hff FILE`."""
    # lazy: the Hub's file rules load when the picker opens, not before the first frame
    from tui.core.remote.hub import resolve_files

    if variant.tag:
        try:
            if [f.path for f in resolve_files(files, repo, variant.tag)] == [f.path for f in variant.files]:
                return f"{repo}:{variant.tag}", ""
        except ValueError:
            pass
    return repo, variant.path


def gib(mib: float | None) -> str:
    """GiB as the CLI writes them: one decimal; under 1 GiB two significant digits (not `0.0`)."""
    if mib is None:
        return "-"
    v = mib / 1024.0
    return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"


def _device_cell(d: Any) -> str:
    """`need (left)`: `13.0 (+2.7)`; a device that runs out shows `-0.7`; unknown free: `?`."""
    head = d.headroom_mib
    left = "?" if head is None else ("+" if head >= 0 else "-") + gib(abs(head))
    return f"{gib(d.needed_mib)} ({left})"


def max_ctx_cell(r: Any) -> str:
    """The CLI's words: `N`, `N (max)` at the training context, `none` (not even 256), `-` not planned."""
    if r.max_ctx is None:
        return "-" if r.shown is None or r.error else "none"
    return f"{r.max_ctx} (max)" if r.max_ctx_limit is not None and r.max_ctx >= r.max_ctx_limit else str(r.max_ctx)


def short_flags(flags: list[str]) -> str:
    """fit's choice for a cell: every flag, but `-ot` as how many tensor overrides it holds."""
    out, it = [], iter(flags)
    for f in it:
        v = next(it, "")
        out.append(f"-ot ({len(v.split(','))} override{'s' if ',' in v else ''})" if f == "-ot" else f"{f} {v}")
    return " ".join(out)


def file_cell(v: Any, hf_file: str) -> str:
    """The file, only where it says what the tag does not: no tag, a file the tag would not pick
    (its name, cut to FILE_CELL), a split set (`3 parts`); "" otherwise."""
    name = v.path.rsplit("/", 1)[-1] if (hf_file or not v.tag) else ""
    if len(name) > FILE_CELL:
        name = name[: FILE_CELL - 1] + "…"
    parts = f"{len(v.files)} parts" if len(v.files) > 1 else ""
    return ", ".join(x for x in (name, parts) if x)


def mmproj_place(settings: Settings | None) -> str:
    """Where llama-server loads the projector (the short form of tui.cli._plan_table.mmproj_place)."""
    extra = list(settings.extra_args) if settings is not None else []
    if reader.present(extra, "--mmproj-offload") is False:
        return "kept in host memory"
    dev = reader.value(extra, "--mmproj-device") or next(
        (d for d in (reader.value(extra, "--device") or "").split(",") if d), "")
    if dev == "none":
        return "kept in host memory"
    return f"loaded on {dev}" if dev else "loaded on the first GPU"


def sidecar_note(side: Any, settings: Settings | None = None) -> str:
    """One line on a file `-hf` downloads beside the row's (remote.hub.Sidecar), which the figures leave out."""
    size = f"{side.size / 2**30:.2f} GiB" if side.size >= 2**30 // 10 else f"{side.size / 2**20:.1f} MiB"
    what = f"-hf also downloads {side.path} ({size})"
    if side.role == "mmproj":
        return f"{what}, {mmproj_place(settings)}, not counted here; --no-mmproj skips it"
    spec = f"--spec-type draft-{side.role}"
    if not side.is_draft:
        return f"{what} for {spec}, but the -md draft is used; not counted here"
    return f"{what}, the draft model for {spec}; not counted here (only the MTP layers inside the model are)"


def _detail(r: Any, hf_repo: str, hf_file: str, kv_cell: str) -> str:
    """The highlighted row in words: its file(s) in full, -c, what fit would do, what Enter puts in the form."""
    v, size = r.variant, f"{r.variant.size / 2**30:.2f} GiB"
    parts = f" +{len(v.files) - 1} parts" if len(v.files) > 1 else ""
    enter = f"-hf {hf_repo}" + (f" -hff {hf_file}" if hf_file else "") + (f" -ctk {r.kv} -ctv {r.kv}" if r.kv else "")
    bits = [f"{v.tag or '-'}, KV {kv_cell}: {v.path}{parts}, {size}"]
    if r.error or r.shown is None:
        bits.append(f"not planned: {(r.error or 'no plan').splitlines()[0]}")
    else:
        bits.append(f"planned at -c {r.ctx}" if r.ctx else "")
        bits.append("tight: inside the --fit-target margin" if r.tight else "")
        bits.append(f"fit would: {' '.join(r.fit_flags)}" if r.fit_flags else "")
        bits.append("fit gives up and loads it as given" if r.fit_gives_up else "")
        mapped = r.mapped_mib
        if mapped >= 0.1 * 1024:
            bits.append(f"Host: {gib(mapped)} GiB of its need is the model file mapped, page cache the system can drop")
    return " · ".join(b for b in [*bits, f"Enter: {enter}"] if b)


def _status(table: Any, lines: list[VariantLine], costs: dict[str, int]) -> str:
    """The commit, the rows by tier, and what the headers cost when they were read (`costs`: path ->
    bytes, kept across re-plans; a header read before the picker counts its size)."""
    n = {t: sum(1 for line in lines if line.tier == t) for t in ("yes", "with fit", "no", "error")}
    tiers = (f"{n['yes']} fit as given, {n['with fit']} with fit, {n['no']} {'does' if n['no'] == 1 else 'do'} not"
             + (f", {n['error']} not planned" if n["error"] else ""))
    seen = {line.path: line.fetched for line in lines if line.fetched is not None}
    for path, f in seen.items():
        if f.traffic.requests:
            costs[path] = f.traffic.bytes
    total = sum(costs.get(path, f.header_bytes) for path, f in seen.items()) / 2**20
    now = table.traffic
    if not now.requests:
        cost = f"{total:.1f} MiB, cached"
    elif now.bytes >= total * 2**20:
        cost = f"{total:.1f} MiB in {now.requests} range request{'s' if now.requests != 1 else ''}"
    else:
        cost = f"{total:.1f} MiB ({now.bytes / 2**20:.1f} MiB of it read now in {now.requests} range requests)"
    rows = f"{len(lines)} row{'s' if len(lines) != 1 else ''}"
    return f"commit {table.commit[:10]}: {rows}: {tiers}; headers: {cost}"  # the repo: in the box's title


def view_of(table: Any, files: list[Any], kv_label: str, settings: Settings | None = None,
            costs: dict[str, int] | None = None, measured: Sequence[RowQuality] = ()) -> VariantsView:
    """A VariantsTable as the picker shows it: the CLI's columns (tui.cli._variants_table) in its
    words, device columns by key from the first planned row; a file column only when a row's file
    says what its tag does not; the -hf sidecars as notes (`settings`: where the projector goes).
    `measured`: `quality.index.measured_rows(table.rows)`, the KV KLD column's figures (looked up
    on the worker: it reads files); none given: the column is blank."""
    first = next((r.shown for r in table.rows if r.shown is not None), None)
    devs = [d.key for d in first.devices] if first is not None else []
    choices = [choice_for(table.repo, files, r.variant) for r in table.rows]
    named = [file_cell(r.variant, hff) for r, (_, hff) in zip(table.rows, choices)]
    columns = ("quant", *(["file"] if any(named) else []), "GiB", "KV", "KV KLD",
               *[f"{k} need (left)" for k in devs], "fits", "max -c", "fit would")
    quality = list(measured) or [None] * len(table.rows)
    lines: list[VariantLine] = []
    sides: dict[str, Any] = {}  # the -hf sidecars, once each
    for r, (hf_repo, hf_file), name, m in zip(table.rows, choices, named, quality):
        v, p = r.variant, r.shown
        kv = r.kv or kv_label
        cells = [v.tag or "-", *([name] if any(named) else []), gib(v.size / 2**20), kv, quality_cell(m, brief=True)]
        if p is None or r.error:
            cells += ["-"] * len(devs) + ["error", "-", ""]
        else:
            by_key = {d.key: d for d in p.devices}
            cells += [_device_cell(by_key[k]) if k in by_key else "-" for k in devs]
            would = short_flags(r.fit_flags) or ("cannot fit" if r.fit_gives_up else "")
            cells += [r.tier, max_ctx_cell(r), would]
        for c in r.sidecars:
            sides.setdefault(c.path, c)
        lines.append(VariantLine(tuple(cells), r.fits, r.error, hf_repo, hf_file, r.kv, v.tag, v.path, r.fetched,
                                 r.tier, _detail(r, hf_repo, hf_file, kv)))
    status = _status(table, lines, {} if costs is None else costs)
    notes = (*(sidecar_note(c, settings) for c in sides.values()), LEGEND)
    return VariantsView(table.repo, status, "", columns, tuple(lines), True, notes)
