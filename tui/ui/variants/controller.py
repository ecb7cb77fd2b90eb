"""The variants picker's work: every quant of the form's `hf-repo` planned side by side from the
headers alone (`tui.core.remote.variants.plan_variants`, on a worker) with what the quality index
knows of each row's K/V types on its file (`quality.index.measured_rows`, on the same worker: it
reads files), and the form's settings for the row the user picks.

Plain state, no widgets: the worker posts `VariantsProgressed` ("listing REPO", "reading the header
of FILE") and `VariantsPlanned` (the table as a `VariantsView`, or the one sentence why not) to the
picker screen, whose handlers hand them back here (`take`) and show what comes out (views.py builds
the rows). A choice becomes settings the form loads (`settings_for_row`); their plan then comes by the
normal path. The cockpit that opens the picker lends it two things of its planning, as plain
callables: the one device list for the screen's devices, and its cache of read headers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tui.core.options import reader
from tui.core.options.settings import Settings
from tui.core.options.validate import errors, validate
from tui.core.planning.devices import DeviceSet
from tui.core.quality.index import measured_rows
from tui.core.remote.errors import RemoteError
from tui.core.remote.source import local_settings, source_of
from tui.ui.host import Host
from tui.ui.variants.messages import VariantsPlanned, VariantsProgressed
from tui.ui.variants.views import VariantsView, view_of

#: the main KV types the picker compares with `k` (the first choice: as the form says)
KV_CHOICES: tuple[tuple[str | None, ...], ...] = ((None,), ("f16", "q8_0", "q4_0"))


def repo_of(settings: Settings) -> tuple[str, str]:
    """(the repo of the form's `hf-repo` without its `:QUANT` tag, "") or ("", what to do instead)."""
    # lazy: the Hub's names load when the picker opens, not before the first frame
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
    return dataclasses.replace(local_settings(settings, ""), model=None)


def settings_maker(settings: Settings, count: int | None) -> Callable[[str, str | None], Settings]:
    """`plan_variants`' `settings_for(path, kv)`: the form's flags on one header copy and KV type,
    through the form's validator (`core.options.validate`); ValueError with the first error."""
    base = base_settings(settings)

    def settings_for(path: str, kv: str | None) -> Settings:
        s = dataclasses.replace(base, model=path, **({"cache_type_k": kv, "cache_type_v": kv} if kv else {}))
        bad = errors(validate(s, None, count, require_model=False))
        if bad:
            raise ValueError(bad[0].message)
        return s

    return settings_for


class VariantsController:
    """The picker's state: the repo, the KV types compared, the newest view; one plan at a time."""

    def __init__(self, settings: Settings, devices: Callable[[], DeviceSet],
                 remember: Callable[[Settings, Any], None]) -> None:
        """`devices()`: the one device list for the screen's devices and the form's `--rpc` servers (a
        worker calls it: it may ask those servers); `remember(settings, fetched)`: the chosen row's
        header copy is the model `settings` name, so the form's plan reads nothing again."""
        self.settings, self._devices, self._remember = settings, devices, remember
        self.repo, self.why_not = repo_of(settings)
        self.kv_choice = 0
        self.seq = 0
        self.view = VariantsView(self.repo)
        self.costs: dict[str, int] = {}  # what each header cost when it was read (path -> bytes)

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
        # lazy: the variants planner and httpx load on the picker's worker
        from tui.core.remote.fetch import repo_listing
        from tui.core.remote.variants import plan_variants
        if self.why_not:
            raise ValueError(self.why_not)
        src = source_of(self.settings)
        token = src.token if src is not None else None
        ds = self._devices()
        settings_for = settings_maker(self.settings, ds.count or None)
        for kv in self.kvs:  # a bad flag is refused once, before anything is fetched
            settings_for("model.gguf", kv)
        table = plan_variants(self.repo, settings_for, ds, list(self.kvs), token=token, progress=progress)
        _commit, files, _cached = repo_listing(self.repo, token)  # cached by plan_variants: no request
        measured = measured_rows(table.rows)  # the KV KLD column: the quality index and header digests, read here
        return view_of(table, files, self.kv_label(), self.settings, self.costs, measured)

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
            self._remember(chosen, row.fetched)  # its header is read: the form's plan asks the Hub nothing
        return chosen
