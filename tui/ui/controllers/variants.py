"""The variants picker's work: every quant of the form's `hf-repo` planned side by side from the
headers alone (`tui.core.remote.variants.plan_variants`, on a worker), and the form's settings for
the row the user picks.

Plain state, no widgets: the worker posts `VariantsProgressed` ("listing REPO", "reading the header
of FILE") and `VariantsPlanned` (the table as a `VariantsView`, or the one sentence why not) to the
picker screen, whose handlers hand them back here (`take`) and show what comes out. A choice
becomes settings the form loads (`settings_for_row`); their plan then comes by the normal path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.controllers.host import Host
from tui.ui.format import mib
from tui.ui.messages import VariantsPlanned, VariantsProgressed
from tui.ui.options import AppOptions

if TYPE_CHECKING:
    from tui.core.planning.devices import DeviceSet

#: the main KV types the picker compares with `k` (the first choice: as the form says)
KV_CHOICES: tuple[tuple[str | None, ...], ...] = ((None,), ("f16", "q8_0", "q4_0"))


@dataclass(frozen=True)
class VariantLine:
    """One row of the picker: its cells, and what Enter puts in the form."""

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


@dataclass(frozen=True)
class VariantsView:
    """What the picker shows: a status line, the columns and the rows (best first), or an error."""

    repo: str
    status: str = ""
    error: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[VariantLine, ...] = ()
    done: bool = False

    @property
    def best(self) -> int | None:
        """The row to highlight: the first one that fits (rows come best first), else None."""
        return next((i for i, r in enumerate(self.rows) if r.fits), None)


def repo_of(settings: Settings) -> tuple[str, str]:
    """(the repo of the form's `hf-repo` without its `:QUANT` tag, "") or ("", what to do instead)."""
    from tui.core.remote.hub import split_repo_tag

    spec = (settings.hf_repo or "").strip()
    if not spec:
        return "", ("type a Hugging Face repo (user/model, e.g. unsloth/Qwen3.6-35B-A3B-GGUF) in the hf-repo field, "
                    "then press v to plan each of its files")
    try:
        return split_repo_tag(spec)[0], ""
    except ValueError as exc:
        return "", str(exc)


def base_settings(settings: Settings) -> Settings:
    """The form's flags without the model's source (-m, -hf, -hff, -mu, -hft): what every row shares."""
    from tui.core.remote.source import local_settings

    return dataclasses.replace(local_settings(settings, ""), model=None)


def settings_maker(settings: Settings, count: int | None) -> Callable[[str, str | None], Settings]:
    """`plan_variants`' `settings_for(path, kv)`: the form's flags on one header copy and KV type,
    through the form's validator (`core.options.validate`); ValueError with the first error."""
    from tui.core.options.validate import errors, validate

    base = base_settings(settings)

    def settings_for(path: str, kv: str | None) -> Settings:
        s = dataclasses.replace(base, model=path, **({"cache_type_k": kv, "cache_type_v": kv} if kv else {}))
        bad = errors(validate(s, None, count, require_model=False))
        if bad:
            raise ValueError(bad[0].message)
        return s

    return settings_for


def choice_for(repo: str, files: list[Any], variant: Any) -> tuple[str, str]:
    """(hf-repo, -hff) that make llama-server download exactly `variant`: `REPO:TAG` when its tag
    picks this file by llama.cpp's rules (`hub.resolve_files`), else `REPO` plus `-hff FILE`."""
    from tui.core.remote.hub import resolve_files

    if variant.tag:
        try:
            if [f.path for f in resolve_files(files, repo, variant.tag)] == [f.path for f in variant.files]:
                return f"{repo}:{variant.tag}", ""
        except ValueError:
            pass
    return repo, variant.path


def _device_cell(d: Any) -> str:
    head = d.headroom_mib
    left = "?" if head is None else ("+" if head >= 0 else "-") + mib(abs(head))
    return f"{mib(d.needed_mib)} ({left})"


def view_of(table: Any, files: list[Any], kv_label: str) -> VariantsView:
    """A VariantsTable as the picker shows it; device columns follow the first planned row's devices."""
    first = next((r.shown for r in table.rows if r.shown is not None), None)
    devs = [d.name or d.key for d in first.devices] if first is not None else []
    columns = ("quant", "file", "size GiB", "KV", *[f"{n} need (left)" for n in devs], "fits", "max -c", "fit would")
    lines = []
    for r in table.rows:
        v, p = r.variant, r.shown
        parts = f" (+{len(v.files) - 1} parts)" if len(v.files) > 1 else ""
        cells = [v.tag or "-", v.path + parts, f"{v.size / 2**30:.2f}", r.kv or kv_label]
        if p is None:
            cells += ["-"] * len(devs) + ["error", "-", r.error]
        else:
            need = [_device_cell(d) for d in p.devices][: len(devs)]
            cells += need + ["-"] * (len(devs) - len(need))
            cells += [r.tier, "-" if r.max_ctx is None else str(r.max_ctx), r.fit_choice or ""]
        hf_repo, hf_file = choice_for(table.repo, files, v)
        lines.append(VariantLine(tuple(cells), r.fits, r.error, hf_repo, hf_file, r.kv, v.tag, v.path, r.fetched,
                                 r.tier))
    fitting = sum(1 for line in lines if line.fits)
    cost = (f"{table.traffic.bytes / 2**20:.1f} MiB in {table.traffic.requests} range request(s)"
            if table.traffic.requests else "read before, nothing fetched now")
    status = f"{table.repo} @ {table.commit[:10]}: {len(lines)} row(s), {fitting} fit; headers only: {cost}"
    return VariantsView(table.repo, status, "", columns, tuple(lines), True)


class VariantsController:
    """The picker's state: the repo, the KV types compared, the newest view; one plan at a time."""

    def __init__(self, settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions) -> None:
        self.settings, self.snapshot, self.options = settings, snapshot, options
        self.repo, self.why_not = repo_of(settings)
        self.kv_choice = 0
        self.seq = 0
        self.view = VariantsView(self.repo)

    @property
    def kvs(self) -> tuple[str | None, ...]:
        return KV_CHOICES[self.kv_choice]

    def kv_label(self) -> str:
        """The KV cell of a row planned with the form's own KV type."""
        return f"{self.settings.cache_type_k or 'f16'} (form)"

    def next_kvs(self) -> None:
        """`k`: compare the next set of main KV types (the headers are cached: a re-plan asks nothing)."""
        self.kv_choice = (self.kv_choice + 1) % len(KV_CHOICES)

    def start(self, host: Host) -> VariantsView:
        """Plan every variant on a worker of `host` (the picker screen); the view to show meanwhile."""
        self.seq += 1
        seq = self.seq
        self.view = VariantsView(self.repo, f"listing {self.repo}")
        host.run_worker(lambda: self._work(host, seq), thread=True, exclusive=True, exit_on_error=False,
                        group="variants")
        return self.view

    def _work(self, host: Host, seq: int) -> None:
        """The worker: never raises; every failure is one sentence in the view."""
        from tui.core.remote.errors import RemoteError

        try:
            view = self.plan(lambda text: host.post_message(VariantsProgressed(seq, text)))
        except (RemoteError, ValueError) as exc:
            view = VariantsView(self.repo, error=str(exc), done=True)
        except Exception as exc:  # noqa: BLE001 - a planner bug must not take the screen down
            view = VariantsView(self.repo, error=f"the variants could not be planned ({type(exc).__name__}: {exc})",
                                done=True)
        host.post_message(VariantsPlanned(seq, view))

    def plan(self, progress: Callable[[str], None] | None = None) -> VariantsView:
        """The table for the form's flags on the screen's devices (blocks: network, then the planner)."""
        from tui.core.remote.fetch import repo_listing
        from tui.core.remote.source import source_of
        from tui.core.remote.variants import plan_variants
        from tui.ui.adapters.planning import devices_for

        if self.why_not:
            raise ValueError(self.why_not)
        src = source_of(self.settings)
        token = src.token if src is not None else None
        ds: DeviceSet = devices_for(self.snapshot, self.options, self.settings.rpc)
        settings_for = settings_maker(self.settings, ds.count or None)
        for kv in self.kvs:  # a bad flag is refused once, before anything is fetched
            settings_for("model.gguf", kv)
        table = plan_variants(self.repo, settings_for, ds, list(self.kvs), token=token, progress=progress)
        _commit, files, _cached = repo_listing(self.repo, token)  # cached by plan_variants: no request
        return view_of(table, files, self.kv_label())

    def take(self, message: VariantsProgressed | VariantsPlanned) -> VariantsView | None:
        """A worker's news: the view to show, or None when it is for an older plan."""
        if message.seq != self.seq or self.view.done:
            return None
        if isinstance(message, VariantsPlanned):
            self.view = message.view
        else:
            self.view = dataclasses.replace(self.view, status=message.text)
        return self.view

    def settings_for_row(self, index: int) -> Settings | None:
        """The form's settings with row `index`'s file as the model (`-hf REPO:TAG`, or `REPO` and
        `-hff FILE`) and its KV type as -ctk/-ctv; None for a row that cannot be chosen."""
        from tui.core.options import reader
        from tui.ui.adapters.remote import remember

        rows = self.view.rows
        if not 0 <= index < len(rows) or rows[index].error:
            return None
        row = rows[index]
        extra = reader.without(list(self.settings.extra_args), "--model-url", "--hf-file")
        if row.hf_file:
            extra += ["-hff", row.hf_file]
        kv = {"cache_type_k": row.kv, "cache_type_v": row.kv} if row.kv else {}
        chosen = dataclasses.replace(self.settings, model=None, hf_repo=row.hf_repo, extra_args=extra, **kv)
        if row.fetched is not None:
            remember(chosen, row.fetched)  # its header is read: the form's plan asks the Hub nothing
        return chosen
