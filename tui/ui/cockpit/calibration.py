"""Calibrating the estimate on the model on screen, in the background, after its first exact result.

Once llama.cpp has measured the model (exact mode's first result), a worker runs the few dry runs
more that fit the model's compute terms (adapters.calibrating.run; a second on a small model, about
20 s on a big one). One job at a time: a new model cancels the old one, as does quitting. Its
progress is a few words beside the plan's source; its end a `Calibrated` message whose handler
(`finished`) attaches the result to the model, after which the screen re-plans: every later
keystroke is the calibrated estimate. A failure is one notification, and the estimate stays.
With exact mode off (--no-exact) nothing runs (a calibration cached earlier is still used).
"""

from __future__ import annotations

import threading

from tui.core.options.settings import Settings
from tui.ui.cockpit import calibrating
from tui.ui.host import Host, Notice
from tui.ui.cockpit.messages import Calibrated, CalibrationProgressed
from tui.ui.options import AppOptions


class CalibrationController:
    """Which model is being calibrated, how far it got, and which models are done this session."""

    def __init__(self, options: AppOptions, host: Host) -> None:
        self.options, self.host = options, host
        self.job = 0  # the newest job's number (a message from an older one is ignored)
        self.model: str | None = None  # the model being calibrated, None when none is
        self.status = ""  # the progress words on screen ("" when nothing runs)
        self.done: set[str] = set()  # models calibrated, or that could not be, this session
        self._cancel = threading.Event()

    @property
    def enabled(self) -> bool:
        return self.options.exact and self.options.fixed is None and self.options.server_bin is not None

    def exact_done(self, settings: Settings) -> bool:
        """An exact result for `settings` is on screen: start calibrating their model unless it is
        calibrated, being calibrated, or exact mode is off. Returns whether a job started."""
        model = calibrating.model_of(settings)
        if not self.enabled or model is None or model in self.done or model == self.model:
            return False
        if calibrating.is_calibrated(model):
            self.done.add(model)
            return False
        self.cancel()
        self.job += 1
        self.model, self.status = model, "calibrating the estimate…"
        job, cancel, server_bin, host = self.job, threading.Event(), self.options.server_bin, self.host
        self._cancel = cancel
        assert server_bin is not None

        def work() -> None:
            meta, result = calibrating.run(model, server_bin, cancel,
                                           lambda text: host.post_message(CalibrationProgressed(job, text)))
            host.post_message(Calibrated(job, model, meta, result))

        host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="calibrate")
        return True

    def progressed(self, message: CalibrationProgressed) -> bool:
        """New progress words; whether they are the running job's (to show)."""
        if message.job != self.job or self.model is None:
            return False
        self.status = message.text
        return True

    def finished(self, message: Calibrated) -> tuple[bool, Notice | None]:
        """(whether the model on screen is now calibrated and wants a re-plan, what to tell the user)."""
        if message.job != self.job:
            return False, None  # a job cancelled for a newer one
        self.model, self.status = None, ""
        why = calibrating.take(message.meta, message.result)
        if why == "":
            return False, None  # cancelled: the next exact result of this model tries again
        self.done.add(message.model)
        if why is not None:
            return False, Notice(f"the estimate stays uncalibrated: {why}", "Calibration", "warning", 8)
        return True, None

    def settings_changed(self, settings: Settings) -> bool:
        """The form changed: a job for another model stops. Returns whether the status changed."""
        if self.model is None or calibrating.model_of(settings) == self.model:
            return False
        self.cancel()
        return True

    def cancel(self) -> None:
        """Stop the job in flight (its dry run is stopped; its late message is ignored)."""
        self._cancel.set()
        if self.model is not None:
            self.job += 1
        self.model, self.status = None, ""

    def shutdown(self) -> None:
        self.cancel()
