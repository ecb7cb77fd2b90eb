"""`mtp-tune tune` on the real machine: the search (`search.Tuner`) over a `machine.Machine` made of the
lab's pieces, with what only a real run has around it.

* launches: one `lab.launcher.SupervisorLauncher` for the whole tune (ready, then a first decode of
  the workload's longest prompt), so every child is stopped on exit, Ctrl-C or SIGTERM; with
  `--stand-ins` it sends every launch to capped stand-ins;
* quality first, when asked (`--max-kld`, several model files, `--ref`): llama-perplexity measures
  each file and each main K/V setting against the reference (`tune.kld`; cached, so a rerun measures
  nothing), and the space keeps only what is within the budget. No server runs meanwhile;
* the workload: a suite is sized by the model's tokenizer on one light launch (`workload.count_suite`),
  a shape's prompt cut by it, both kept in the journal;
* fit-target: searched only where `--fit` has real device memory to act on (GPUs NVML sees, `--rpc`
  servers, stand-ins). Simulated GPUs without stand-ins are planned against, but the candidates run
  on this machine's CPU backend, which never runs out of device memory, so a search there would only
  walk down to 0 MiB and prove nothing;
* resume: the tune's journal (`lab.journal`, kind "tune") saved after every trial;
* the answer's last step (`final_ab`): the lab's A/B of the best MTP-on and MTP-off configurations,
  interleaved, at 1 and at N requests at once when the workload has N, kept in the journal too.

`TuneRun.run()` blocks; `stop()` from any thread ends it between steps (a launch within 0.2 s, a
probe within its 50 ms poll), with every finished record kept.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from tui.core.lab.launcher import (DEFAULT_READY_TIMEOUT, SupervisorLauncher, aim_first_decode, equipped,
                                   stand_in_note, stand_ins_problem)
from tui.core.options.settings import Settings
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.lab import ranking
from tui.core.lab.journal import Journal, JournalError, JournalLock, open_journal
from tui.core.lab.trial import MEASURED, PRUNED, Trial
from tui.core.lab.events import EventFn, LabError, LabEvent, Progress
from tui.core.quality.measure import QualityError
from tui.core.tune.files import TuneModel
from tui.core.tune.kld import KldError, Measurer, QualityAsk, QualityBook, find_measurer, tune_quality
from tui.core.tune.space import Floors, Space, SpaceError, expected_trials, launch_settings, space_for_model
from tui.core.tune.result import TuneResult, build_result, fmt_seconds
from tui.core.tune.identity import check_section, hardware_identity, tune_definition, tune_id
from tui.core.tune.machine import Machine, Measure, gpu_hygiene, planner, real_offload
from tui.core.tune.workload import (Workload, WorkloadError, WorkloadSpec, concurrency_note, count_suite, placeholder,
                                    sizing_settings)
from tui.core.tune.search import TuneOptions, Tuner
from tui.core.lab.ranking import AbVerdict
from tui.core.lab.ab_load import LoadVerdict
from tui.core.tune.final_ab import measure_ab, saved_ab, why_no_ab


T = TypeVar("T")


@dataclass
class TuneRequest:
    """Everything `mtp-tune tune` was given, validated."""

    base: Settings  # the fixed flags (every flag the user gave), through the one validator
    workload: WorkloadSpec
    server_bin: Path
    floors: Floors = field(default_factory=Floors)
    values: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # axis -> values searched
    gpus: str | None = None  # --gpus SPEC (simulated), None: the real devices
    budget_s: float | None = None
    ab_passes: int = 3
    fresh: bool = False
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    state_root: Path | None = None
    options: TuneOptions = field(default_factory=TuneOptions)
    model: TuneModel | None = None  # what to read and plan (`tune_model`); None: base.model, on disk
    stand_ins: bool = False  # simulated GPUs: launch on memory-capped stand-ins (`lab.launcher`)
    #: the header `build_request` read (the run plans on it instead of reading the GGUF again)
    meta: GGUFMeta | None = field(default=None, compare=False, repr=False)
    quality: QualityAsk | None = None  # what llama-perplexity measures before the trials (`args.quality_ask`)
    perplexity_bin: Path | None = None  # None: beside the server, else mtp-tune's build

    def header_path(self) -> Path:
        return self.model.path if self.model is not None else Path(str(self.base.model)).expanduser()


@dataclass
class TuneOutcome:
    tune_id: str
    result: TuneResult
    space: Space
    workload: Workload
    ab: AbVerdict | None
    ab_note: str  # why there is no A/B, or where it came from
    launches: int  # this run: sizing, trials (fit searches included) and the A/B
    launches_total: int  # over every run of this tune
    elapsed_s: float
    hardware: str
    fit_searched: bool
    state_path: Path | None
    notes: list[str] = field(default_factory=list)
    hygiene_checked: bool = False  # the GPUs' hygiene was checked before each launch (NVML sees them)
    ab_levels: LoadVerdict | None = None  # at a concurrency above 1: the A/B at 1 and at it, side by side
    quality: QualityBook | None = None  # what quality measured (None: nothing asked)

    def settings_of(self, rec: Trial | None) -> Settings | None:
        """What a record launched, unredacted (the fit-target it found included)."""
        return launch_settings(self.space, rec) if rec is not None else None


class TuneRun:
    """One run of a tune (resuming the saved one with the same id unless `fresh`)."""

    def __init__(self, req: TuneRequest, *, devices: Any = None, store: Any = None,
                 on_event: EventFn | None = None) -> None:
        from tui.core.planning.devices import devices_now

        self.req, self.store, self.on_event = req, store, on_event
        self.devices = devices if devices is not None else devices_now(req.gpus, list(req.base.rpc))
        hardware = {**hardware_identity(self.devices, req.gpus), **({"stand_ins": True} if req.stand_ins else {})}
        self.definition = tune_definition(req.base, req.workload, req.floors, req.values, hardware,
                                          rungs=req.options.rungs, quality=req.quality)
        self.tune_id = tune_id(self.definition)
        self.cancel = threading.Event()
        self.launches = 0
        self._prog = Progress(0, on_event)
        self._tuner: Tuner | None = None
        #: What proposes the candidates: the search; `tuner.GridReference` for a bench's reference.
        self.strategy: type[Tuner] = Tuner
        self._space: Space | None = None
        self._error: Exception | None = None
        #: the quality seam (`tune.kld.Measurer`); None: llama-perplexity (`kld.real_measurer`)
        self.measurer: Measurer | None = None
        self.quality: QualityBook | None = None
        self._values: dict[str, tuple[Any, ...]] = dict(req.values)

    def stop(self) -> None:
        self.cancel.set()

    def emit(self, kind: str, message: str, **kw: Any) -> None:
        """A `LabEvent` to `on_event` (which a caller may set after making the run): trials done so far."""
        self._prog.on_event = self.on_event
        self._prog.done = len(self._tuner.records) if self._tuner is not None else 0
        self._prog.emit(kind, message, **kw)

    def run(self) -> TuneOutcome:
        """Run (or resume) the tune to its answer, its budget or a stop (LabError when it cannot)."""
        with JournalLock("tune", self.tune_id, self.req.state_root):  # before reading: another process may write it
            st = open_journal("tune", self.tune_id, self.definition, self.req.state_root, fresh=self.req.fresh,
                              check_more=check_section)
            try:
                self._measure_quality()  # before any server: nothing over the budget is ever launched
                with contextlib.ExitStack() as stack:
                    stand_ins = self._stand_ins(stack)
                    launcher, self.store = stack.enter_context(equipped(
                        None, self.req.server_bin, self.store, stand_ins=stand_ins, ready_timeout=self.req.ready_timeout))
                    return self._run(st, launcher)
            finally:
                st.save()

    def _stand_ins(self, stack: contextlib.ExitStack) -> Any:
        """The capped stand-ins a `--stand-ins` tune launches on, started and stopped with `stack`
        (None without it)."""
        if not self.req.stand_ins:
            return None
        from tui.core.planning.standin import StandInError, StandIns
        from tui.core.server.provision import rpc_server_for

        why = stand_ins_problem(self.req.gpus, self.devices)
        if why:
            raise LabError(why)
        simulated = [d for d in self.devices.devices if not d.remote]
        rpc_bin = rpc_server_for(Path(self.req.server_bin))
        if rpc_bin is None:
            raise LabError(f"--stand-ins needs ggml-rpc-server beside {self.req.server_bin} (mtp-tune doctor --build).")
        try:
            self.emit("stand-ins", f"starting {len(simulated)} capped stand-in(s) for {self.req.gpus}")
            return stack.enter_context(StandIns(rpc_bin, simulated, capped=True))
        except (StandInError, RuntimeError, OSError) as e:
            raise LabError(f"the stand-ins for --gpus {self.req.gpus} could not start: {e}") from None

    # ------------------------------------------------------------------ steps

    def _measure_quality(self) -> None:
        """What the files and main K/V settings cost (`tune.kld`), and the values within the budget."""
        req, ask = self.req, self.req.quality
        if ask is None:
            return

        def say(msg: str) -> None:
            self.emit("quality", f"quality: {msg}")

        say(f"measuring against {ask.reference.name} with llama-perplexity (what is cached is not measured again)")
        pre = self._space_for(placeholder(req.workload), values=req.values or None)
        try:
            measurer = self.measurer or find_measurer(req.perplexity_bin, req.server_bin, say, self.cancel,
                                                      tick=lambda m: self.emit("measuring", f"quality: {m}"))
            self.quality, within = tune_quality(ask, pre, req.base, measurer, say)
        except QualityError as e:
            if self.cancel.is_set():
                raise LabError("cancelled while measuring quality; nothing was tuned yet.") from None
            raise LabError(f"quality could not be measured: {e}") from None
        except (KldError, ValueError) as e:  # ModelError, BudgetError, TextError: one sentence each
            raise LabError(str(e)) from None
        self._values.update(within)
        for n in self.quality.notes:
            say(n)

    def _launched(self, st: Journal, what: str) -> None:
        self.launches += 1
        st.launches += 1
        self.emit("launching", f"launch {self.launches}: {what}")

    def _sizing(self, st: Journal, launcher: SupervisorLauncher, why: str, fn: Callable[[str], T]) -> T:
        """`fn(url)` against the lightest launch of the model (its tokenizer is all it is for)."""
        self._launched(st, why)
        out = launcher.launch(sizing_settings(self.req.base), self.cancel)
        try:
            if out.cancelled:
                raise LabError("cancelled while sizing the workload; nothing was tuned yet.")
            if not out.ok:
                raise LabError(f"the sizing launch (the model alone, no MTP, nothing offloaded) failed: {out.reason}")
            try:
                return fn(out.url or "")
            except WorkloadError as e:
                raise LabError(f"the workload could not be sized: {e}") from None
        finally:
            launcher.stop()

    def _workload(self, st: Journal, launcher: SupervisorLauncher) -> Workload:
        spec = self.req.workload
        if spec.shape is not None:
            return spec.shape
        if st.tune.workload is not None:
            return spec.sized(Workload.from_json(st.tune.workload))
        suite = spec.suite
        assert suite is not None
        w = self._sizing(st, launcher, "sizing the suite with the model's tokenizer",
                         lambda url: spec.sized(count_suite(url, suite, api_key=self.req.base.api_key)))
        st.tune.workload = w.to_json()
        st.save()
        self.emit("sized", f"workload {w.label}: {w.in_tokens:.0f} prompt tokens and {w.out_tokens:.0f} generated per "
                           f"request on average, the longest {w.longest} tokens")
        return w

    def _space_for(self, workload: Workload, **kw: Any) -> Space:
        """The space for `workload` from the model's header (read once by `build_request`); LabError."""
        req = self.req
        try:
            meta = req.meta if req.meta is not None else self._header()
            return space_for_model(req.base, meta, workload, floors=req.floors, **kw)
        except (SpaceError, ValueError, OSError) as e:
            raise LabError(str(e)) from None

    def _header(self) -> Any:
        from tui.core.planning.gguf_reader import read_gguf  # the planner's reader: loaded when a tune runs

        return read_gguf(str(self.req.header_path()))

    def _run(self, st: Journal, launcher: SupervisorLauncher) -> TuneOutcome:
        from tui.core.lab.knobs import smallest_fit_target

        req = self.req
        workload = self._workload(st, launcher)  # before the first-decode prompt: the sizing launch has a small context
        aim_first_decode(launcher, req.workload.first_decode())
        space = self._space = self._space_for(workload, values=self._values or None,
                                              refused=self.quality.refused if self.quality else None)
        fit = (req.stand_ins or real_offload(self.devices, req.gpus)) and not space.fit_fixed
        notes = [*space.notes, *(req.model.notes if req.model else ()), *(self.quality.notes if self.quality else ())]
        if workload.concurrency > 1:
            grid = space.grid()
            meta = req.meta if req.meta is not None else self._header()
            notes.append(concurrency_note(space.ctx, workload.concurrency, grid[-1].settings if grid else None, meta,
                                          self.devices))
        if launcher.stand_ins is not None:
            notes.append(stand_in_note(launcher.stand_ins.simulated))
        elif req.gpus not in (None, "cpu") and not fit:
            notes.append(f"--gpus {req.gpus}: candidates are planned against the simulated GPUs but run on this machine, "
                         "which cannot run out of their memory, so no --fit-target is searched (--stand-ins launches "
                         "them on stand-ins capped at the GPUs' memory).")
        measure = Measure(req.workload, launcher, st, self.store, tune_id=self.tune_id, cancel=self.cancel,
                          on_request=lambda i, n, prompt: self.emit("measuring", f"measuring: request {i} of {n} ({prompt})"))
        if fit and measure.text is None and req.workload.shape is not None:
            # On a GPU the fit-target search's first decodes must see the workload's own prompt.
            self._sizing(st, launcher, "cutting the workload's prompt with the model's tokenizer",
                         lambda url: measure.suite(url, req.base.api_key))
        hygiene = gpu_hygiene(self.devices, req.gpus)
        machine = Machine(launcher, measure, planner(req),
                          (lambda s, la, ev: smallest_fit_target(s, launcher=la, cancel=ev)) if fit else None,
                          on_launch=lambda s: self._launched(st, _brief(s)), hygiene=hygiene)
        previous = list(st.trials.values())
        resumed = len(previous)
        tuner = self._tuner = self.strategy(space, workload, machine, replace(req.options, budget_s=req.budget_s),
                                    previous=previous, on_event=lambda ev: self._on_trial(st, ev), cancel=self.cancel)
        self.emit("started", f"tune {self.tune_id}: {len(space.grid())} configurations, context {space.ctx}, "
                             f"{resumed} already known" + ("" if fit else "; no --fit-target search (no real GPU)"))
        try:
            result = tuner.run()
        finally:
            if hygiene is not None:
                hygiene.close()
        if self._error is not None:
            raise LabError(str(self._error))
        ab, ab_note, ab_levels = self._ab(st, launcher, space, workload, result, measure)
        if ab is not None:  # the A/B is the stronger evidence on MTP on against off: the answer says it
            result = build_result(result.records, self.req.options.rungs, result.launches, result.grid_size, result.stopped,
                                  result.elapsed_s, workload, ab)
        st.save()
        return TuneOutcome(self.tune_id, result, space, workload, ab, ab_note, self.launches, st.launches,
                           self._prog.elapsed(), str(self.devices.source), fit, st.path, notes,
                           hygiene_checked=hygiene is not None, ab_levels=ab_levels, quality=self.quality)

    def _on_trial(self, st: Journal, ev: LabEvent) -> None:
        if ev.kind == "hygiene":
            self.emit("hygiene", ev.message)
        if ev.kind != "trial" or ev.trial is None:
            return
        rec: Trial = ev.trial
        if not (self.cancel.is_set() and rec.launches and not rec.resumed):  # a trial cut short runs again
            try:
                st.record(rec)
                st.save()
            except JournalError as e:
                self._error = e
                self.cancel.set()
        self.emit("trial", f"{ev.message}  |  {self.status_line()}", trial=rec, eta_s=self.eta())

    def status_line(self) -> str:
        recs = self._tuner.records if self._tuner is not None else []
        measured = sum(1 for r in recs if r.status in MEASURED)
        pruned = sum(1 for r in recs if r.status in PRUNED)
        failed = sum(1 for r in recs if r.status == "failed")
        best, _ = ranking.choose(recs, self.req.options.rungs)
        b = "none yet" if best is None else f"#{best.number} {fmt_seconds(best.e2e())} s/request"
        if best is not None and best.e2e() is not None and best.e2e().n > 1:  # type: ignore[union-attr]
            b += f" (spread {best.e2e().spread:.1%})"  # type: ignore[union-attr]
        eta = self.eta()
        return (f"{len(recs)} trials: {measured} measured, {pruned} pruned, {failed} failed; best {b}; "
                f"{self.launches} launches" + (f"; ETA ~{eta:.0f}s" if eta is not None else ""))

    def eta(self) -> float | None:
        """Seconds left, roughly: the candidates a search usually considers, at this run's pace."""
        if self._tuner is None or self._space is None:
            return None
        recs = self._tuner.records
        new = [r for r in recs if not r.resumed]
        spent = sum(r.seconds for r in new)
        if not new or spent <= 0:
            return None
        left = max(0, expected_trials(self._space) - len(recs)) * spent / len(new)
        if self.req.budget_s is not None:
            left = min(left, max(0.0, self.req.budget_s - (self._prog.elapsed())))
        return round(left, 1)

    def _ab(self, st: Journal, launcher: SupervisorLauncher, space: Space, workload: Workload, result: TuneResult,
            measure: Measure) -> tuple[AbVerdict | None, str, LoadVerdict | None]:
        """The final A/B (`final_ab`): (the verdict at the workload's concurrency, where it came from, and at
        a concurrency above 1 the verdicts at 1 and at it side by side)."""
        on, off, n, load = result.best_mtp_on, result.best_mtp_off, self.req.ab_passes, workload.concurrency
        if (why := why_no_ab(result, n)) is not None or on is None or off is None:
            return None, why or "", None
        note = f"#{on.number} (MTP on) against #{off.number} (MTP off), {n} passes each"
        if (known := st.tune.ab_verdict(on.key, off.key, n)) is not None:
            v, levels = saved_ab(known, load)
            return v, note + ", from the saved tune", levels
        try:
            suite = measure.suite(None, self.req.base.api_key)
        except WorkloadError as e:
            return None, f"no A/B: {e}.", None
        self.emit("ab", f"final step: MTP on #{on.number} against MTP off #{off.number}, {n} interleaved passes each")

        def on_ab(ev: LabEvent) -> None:
            if ev.kind == "launching":
                self.launches += 1
                st.launches += 1
            if ev.kind in ("launching", "pass_done", "launch_failed"):
                self.emit("ab", f"A/B: {ev.message}", eta_s=ev.eta_s)

        v, levels = measure_ab(launch_settings(space, on), launch_settings(space, off), suite,
                               (round(workload.in_tokens), round(workload.out_tokens)), n, load,
                               exact_output=self.req.workload.exact_output, launcher=launcher, on_event=on_ab,
                               cancel=self.cancel, store=self.store)
        if levels is not None:
            note += f", at concurrency {' and '.join(str(k) for k, _ in levels.levels)}"
        done = levels if levels is not None else v
        if done is not None and done.status == "complete":
            st.tune.set_ab(on.key, off.key, n, done.to_json())
        return v, note, levels


def _brief(s: Settings) -> str:
    parts = ["MTP" + (f" n{s.spec_draft_n_max}" if s.spec_draft_n_max else "") if s.mtp_enabled else "no MTP"]
    for flag, v in (("-ub", s.ubatch_size), ("-b", s.batch_size), ("-ctk", s.cache_type_k), ("-ctkd", s.cache_type_k_draft),
                    ("-fa", s.flash_attn), ("-ncmoe", s.n_cpu_moe), ("-fitt", s.fit_target[0] if s.fit_target else None)):
        if v is not None:
            parts.append(f"{flag} {v}")
    return " ".join(parts)
