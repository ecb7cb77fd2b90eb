"""The lab's one door to the core's actions: a sweep, an MTP on/off A/B, a search or a tune, one at a time.

Each runs in a thread worker on the host (the cockpit screen), so the user can leave the sweep
screen (or the verdict) and the work goes on, its progress on the cockpit's bottom line. Workers
post messages (`tui.ui.lab.messages`) to the host; its handler hands them to `take`, which owns the
state, and then shows `line()` and tells the lab screens on the stack (`tuning_changed`). One action
at a time: each launches its own llama-server, and two would compete for the same memory and CPU.

The user's own server is never stopped silently: `stops_server()` says whether starting an action
would stop it (the screens ask first, `lab.confirm`), and once the action that stopped it is over
`take_offer()` hands over the settings it ran with, so the cockpit can offer to launch it again.

What the lab needs of the cockpit are protocols (`ServerPort`, `ProblemsPort`): the lab never imports
the cockpit, whose server and plan controllers satisfy them by shape (a test can pass any object
that does). The screens' own blocking work (planning a grid, checking a tune's setup, saving) calls
`experiments` and `tune_ops` on their workers directly: it touches nothing here.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from textual.message import Message

from tui.core.options.settings import Settings
from tui.ui.host import Host, Notice
from tui.ui.lab import experiments, tune_ops, verdict_levels
from tui.ui.lab.messages import (
    AbFinished, AbProgressed, Finished, SearchFinished, SearchProgressed, SweepFinished, SweepProgressed, TuneFinished,
    TuneProgressed, TuningChanged,
)
from tui.ui.lab.tune_views import TuneSetup, TuneView
from tui.ui.lab.views import SearchView, SweepSetup, SweepView, VerdictView, Versus, clock
from tui.ui.options import AppOptions

#: How long shutdown waits for a cancelled action to stop its server (the supervisor's grace is 5 s).
STOP_WAIT_S = 8.0
NAMES = {"sweep": "a sweep", "ab": "the MTP on/off run", "search": "a search", "tune": "a tune"}


class ServerPort(Protocol):
    """What the lab needs of the cockpit's server controller: whether the user's server runs, with
    what, why a launch cannot happen, and a stop that tells the cockpit (called on a worker)."""

    @property
    def alive(self) -> bool: ...

    def running_settings(self) -> Settings | None: ...

    def blocked(self, action: str, problems: Sequence[Any] = ()) -> str | None: ...

    def stop_now(self) -> None: ...

    #: The user's last launch's seconds to ready (None before one): what an experiment's launches take.
    launch_s: float | None


class ProblemsPort(Protocol):
    """The settings on screen and their problems (a launch with errors is refused)."""

    problems: Sequence[Any]

    @property
    def settings(self) -> Settings: ...


@dataclass(frozen=True)
class RestartOffer:
    """The user's server was stopped for an experiment that is now over: what it ran with, and which
    experiment stopped it (the offer names it)."""

    settings: Settings
    what: str


class LabController:
    """What runs in the background, and the last sweep, verdict, search and tune."""

    def __init__(self, backend: Any, options: AppOptions, host: Host, server: ServerPort,
                 plan: ProblemsPort) -> None:
        self.backend, self.options, self.host, self.server, self.plan = backend, options, host, server, plan
        self.running: str | None = None  # sweep | ab | search | tune
        self.tg_seen: float | None = None  # the slowest TG a probe measured on this machine (t/s)
        self.finished: Counter[str] = Counter()  # actions ended, by kind (tests wait on it)
        self.sweep_setup: SweepSetup | None = None  # the sweep screen's last setup (kept while the App runs)
        self.sweep_defn: Any = None
        self.sweep_view: SweepView | None = None
        self.verdict: Any = None  # the core's AbVerdict: re-judged for new workloads without running
        self.verdict_view: VerdictView | None = None
        self.ab_workload: tuple[int, int] = (1000, 500)
        self.search_view: SearchView | None = None
        self.tune_setup: TuneSetup | None = None  # the tune screen's last setup (kept while the App runs)
        self.tune_view: TuneView | None = None
        self.tune_outcome: Any = None  # the core's TuneOutcome of the last tune that ran
        self.tune_base: Settings | None = None  # its fixed flags (the report lists them)
        # the last A/B's suite, passes, n_predict, what it was against and requests at once, for `g`
        self._ab_args: tuple[str, int, int | None, Versus | None, int] | None = None
        self.offer: RestartOffer | None = None  # set when an action that stopped the user's server ends
        self._stopped: RestartOffer | None = None  # the running action stopped the user's server
        self._job: Any = None  # the running Sweep or TuneRun, and how to stop it
        self._stop_job: Callable[[], None] | None = None
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()

    # --- starting --------------------------------------------------------------------------------

    def expected(self, size: Any) -> str:
        """A long run's expected duration, said before it starts (`size`: a core `WorkSize`), from the
        user's last launch and the slowest probed speed; how to get one when neither is known yet."""
        seconds = size.seconds(self.tg_seen, self.server.launch_s)
        if seconds is None:
            return "Its duration is not known yet: launch and probe once (l, then p) and this says how long."
        return (f"Expected: about {clock(seconds)} at least (from this machine's last launch, "
                f"{self.server.launch_s:.0f} s, and its slowest probed speed, {self.tg_seen:.1f} t/s).")

    def blocked(self) -> str | None:
        """Why no tuning action can start now (None: it can)."""
        if self.running:
            return f"{NAMES[self.running]} is running; let it finish or cancel it (x) first"
        return self.server.blocked("launch", self.plan.problems)

    def stops_server(self) -> bool:
        """Starting an action now would stop the user's own server (the screens ask first)."""
        return self.server.alive

    def _start(self, kind: str, body: Callable[[threading.Event], Message]) -> None:
        """Run `body(cancel)` in a worker (after stopping the user's server, which holds the memory the
        action needs: the screens asked first) and post the message it returns."""
        self.running = kind
        self._cancel = cancel = threading.Event()
        self._idle.clear()
        settings = self.server.running_settings() if self.server.alive else None
        self._stopped = RestartOffer(settings, NAMES[kind]) if settings is not None else None
        self.offer = None

        def work() -> None:
            try:
                if settings is not None:
                    self.server.stop_now()
                self.host.post_message(body(cancel))
            finally:
                self._idle.set()

        self.host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="tuning", name=kind)
        self.changed()

    def _started(self, job: Any, stop: Callable[[], None]) -> None:
        """A worker's Sweep or TuneRun is about to run: `stop` cancels it (at once if asked already)."""
        self._job, self._stop_job = job, stop
        if self._cancel.is_set():
            stop()

    def take_offer(self) -> RestartOffer | None:
        """The restart offer, once (the cockpit shows it)."""
        offer, self.offer = self.offer, None
        return offer

    def start_sweep(self, defn: Any, plans: dict[str, Any]) -> str | None:
        """Run (or resume) `defn`; returns why it cannot start."""
        if reason := self.blocked():
            return reason
        self.sweep_defn = defn
        tracker = experiments.SweepTracker(defn, plans, lambda v: self.host.post_message(SweepProgressed(v)))
        self.sweep_view = tracker.view
        server_bin, simulate = self.options.server_bin, experiments.simulated(self.options)

        def body(cancel: threading.Event) -> Message:
            if cancel.is_set():
                return SweepFinished(replace(tracker.view, running=False, message="sweep cancelled"))
            return SweepFinished(*experiments.run_sweep(defn, server_bin=server_bin, simulate=simulate,
                                                        tracker=tracker, started=self._started))

        self._start("sweep", body)
        return None

    def start_ab(self, settings: Settings, *, suite: str, passes: int, n_predict: int | None,
                 versus: Versus | None = None, concurrency: int = 1) -> str | None:
        """MTP on vs off with `settings` (at N > 1 `concurrency`: at 1 and at N, `verdict_levels`), or
        `settings` (A) against `versus` (B: a profile, another binary); returns why it cannot start."""
        if reason := self.blocked():
            return reason
        self._ab_args = (suite, passes, n_predict, versus, concurrency)
        workload = self.ab_workload
        self.verdict = None
        title = versus.title if versus is not None else "MTP on vs off"
        levels = verdict_levels.levels(concurrency) if concurrency > 1 and versus is None else [1]
        at = f", at {' and '.join(map(str, levels))} at once" if len(levels) > 1 else ""
        self.verdict_view = VerdictView(running=True, total=2 * passes * len(levels), workload=workload, title=title,
                                        names=("A", "B") if versus is not None else VerdictView().names,
                                        message=f"{title}: {passes} passes each, interleaved{at}")
        server_bin = self.options.server_bin

        def emit(ev: Any) -> None:
            self.host.post_message(AbProgressed(ev))

        def body(cancel: threading.Event) -> Message:
            if len(levels) > 1:
                return AbFinished(*verdict_levels.run(settings, suite=suite, workload=workload, passes=passes,
                                                      n_predict=n_predict, concurrency=concurrency,
                                                      server_bin=server_bin, cancel=cancel, on_event=emit))
            return AbFinished(*experiments.run_ab(settings, versus=versus, suite=suite, workload=workload, passes=passes,
                                                  n_predict=n_predict, server_bin=server_bin, cancel=cancel,
                                                  on_event=emit))

        self._start("ab", body)
        return None

    def rerun_ab(self) -> str | None:
        """The last A/B again (MTP on vs off, or against the same profile or binary) with the settings on
        screen now, the last run's suite and passes (the verdict screen's `g`)."""
        if self._ab_args is None:
            return "press a on the main screen to run MTP on vs off"
        suite, passes, n_predict, versus, concurrency = self._ab_args
        return self.start_ab(self.plan.settings, suite=suite, passes=passes, n_predict=n_predict, versus=versus,
                             concurrency=concurrency)

    def start_search(self, knob: str, settings: Settings) -> str | None:
        """The largest context or the smallest fit-target; returns why it cannot start."""
        if reason := self.blocked():
            return reason
        self.search_view = experiments.search_start(knob, self.options)
        server_bin, simulate = self.options.server_bin, experiments.simulated(self.options)

        def body(cancel: threading.Event) -> Message:
            return SearchFinished(*experiments.run_search(
                knob, settings, server_bin=server_bin, simulate=simulate, cancel=cancel,
                on_event=lambda e: self.host.post_message(SearchProgressed(e))))

        self._start("search", body)
        return None

    def start_tune(self, prepared: tune_ops.Prepared) -> str | None:
        """Run (or continue) the tune the screen checked (`tune_ops.prepare`: the header is not read
        again); returns why it cannot start."""
        if reason := self.blocked():
            return reason
        self.tune_setup = prepared.setup
        self.tune_view = TuneView(running=True, message="starting…", budget_s=prepared.request.budget_s)
        store = self.backend.store()

        def body(cancel: threading.Event) -> Message:
            tracker = tune_ops.TuneTracker(prepared, lambda v: self.host.post_message(TuneProgressed(v)))
            if cancel.is_set():
                return TuneFinished(TuneView(stopped="cancelled", message="tune cancelled before it began"))
            outcome, view, error = tune_ops.run_tune(prepared, store=store, tracker=tracker, started=self._started)
            return TuneFinished(view, error, outcome, prepared.request.base)

        self._start("tune", body)
        return None

    def cancel(self) -> bool:
        """Cancel the running action (its server is stopped; a sweep or a tune keeps what it finished)."""
        if not self.running:
            return False
        self._stop_running()
        self.changed(extra="cancelling…")
        return True

    def _stop_running(self) -> None:
        self._cancel.set()
        if self._stop_job is not None:
            self._stop_job()

    def rejudge(self, prompt_tokens: int, output_tokens: int) -> VerdictView | None:
        """The last verdict for another workload (instant: the same samples, nothing run)."""
        self.ab_workload = (prompt_tokens, output_tokens)
        if self.verdict is not None:
            self.verdict, self.verdict_view = experiments.rejudge(self.verdict, self.verdict_view or VerdictView(),
                                                                  self.ab_workload)
        elif self.verdict_view is not None:
            self.verdict_view = replace(self.verdict_view, workload=self.ab_workload)
        return self.verdict_view

    def changed(self, extra: str = "") -> None:
        """The state changed outside a worker's message: the host redraws the line and the screens."""
        self.host.post_message(TuningChanged(extra))

    # --- news from the workers: the state changes here -------------------------------------------

    def take(self, message: Message) -> Notice | None:
        """A worker's message; returns what to tell the user, if anything."""
        if isinstance(message, Finished):
            self.finished[self.running or ""] += 1
            self.running, self._job, self._stop_job = None, None, None
            self.offer, self._stopped = self._stopped, None  # the offer to restart the server it stopped
            return self._ended(message)
        if isinstance(message, SweepProgressed) and self.running == "sweep":
            self.sweep_view = message.value
        elif isinstance(message, TuneProgressed) and self.running == "tune":
            self.tune_view = message.value
        elif isinstance(message, AbProgressed) and self.running == "ab" and self.verdict_view is not None:
            self.verdict_view = experiments.progress_view(message.value, self.verdict_view)
        elif isinstance(message, SearchProgressed) and self.running == "search" and self.search_view is not None:
            self.search_view = experiments.search_view(self.search_view, ev=message.value)
        return None

    def _ended(self, message: Finished) -> Notice | None:
        """An action's end: its last view, and what to tell the user."""
        error = message.error
        if isinstance(message, SweepFinished):
            v = self.sweep_view = message.value
            best = next((r for r in v.rows if r.number == v.best), None)
            what = f"best #{best.number} ({' '.join(best.values)})" if best else "nothing measured"
            return Notice(error, "Sweep failed", "error", 12) if error else \
                Notice(f"{v.message}: {what}; w shows the table", "Sweep", "information")
        if isinstance(message, TuneFinished):
            t = self.tune_view = message.value
            if message.outcome is not None:
                self.tune_outcome, self.tune_base = message.outcome, message.base
            if error:
                return Notice(error, "Tune failed" if message.outcome is None else "Tune", "error", 12)
            what = f"best {t.best_text}" if t.best_text else "nothing measured"
            return Notice(f"{t.message}: {what}; T shows the trials", "Tune", "information")
        if isinstance(message, SearchFinished):
            if self.search_view is not None:
                self.search_view = experiments.search_view(self.search_view, result=message.value, error=error)
            return None
        old = self.verdict_view or VerdictView()
        if message.value is not None:
            self.verdict = message.value
            if self.verdict.workload != self.ab_workload:  # edited while it ran
                self.verdict = self.verdict.for_workload(*self.ab_workload)
            self.verdict_view = experiments.verdict_view(self.verdict, done=old.total, total=old.total, title=old.title,
                                                         message=f"{old.title}: {self.verdict.status}")
        else:
            self.verdict_view = replace(old, running=False, message=error or "failed", error=error)
        return Notice(error, "A/B" if old.names != VerdictView().names else "MTP on/off", "error", 12) if error else None

    # --- showing ---------------------------------------------------------------------------------

    def line(self, extra: str = "") -> str:
        """What the main screen's bottom line says about the tuning actions ("": nothing to say)."""
        text = self._line()
        return f"{text} · {extra}" if text and extra else text or extra

    def _line(self) -> str:
        if self.running == "sweep" and self.sweep_view is not None:
            s = self.sweep_view
            return f"◆ sweep {s.progress_text()} · {s.message} · w shows it, x cancels in there"
        if self.running == "ab" and self.verdict_view is not None:
            v = self.verdict_view
            eta = f" · ETA {clock(v.eta_s)}" if v.eta_s is not None else ""
            what = "MTP on/off" if v.names == VerdictView().names else "A/B"
            return f"◆ {what} pass {v.done:.0f}/{v.total}{eta} · {v.message} · a shows it"
        if self.running == "search" and self.search_view is not None:
            return f"◆ {self.search_view.title.lower()}: {self.search_view.message}"
        if self.running == "tune" and self.tune_view is not None:
            return f"◆ tune {self.tune_view.status_text()} · T shows it, x cancels in there"
        if (s := self.sweep_view) is not None and self.finished["sweep"]:
            return f"◆ last sweep: {s.message} · best #{s.best} · w shows it" if s.best else f"◆ last sweep: {s.message}"
        return ""

    def shutdown(self) -> None:
        """Quitting: cancel what runs and give it a bounded time to stop its server."""
        if self.running:
            self._stop_running()
            self._idle.wait(STOP_WAIT_S)
