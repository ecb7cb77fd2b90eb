"""The plan panel's quality line: what the K/V types on screen cost, and measuring it in the background.

What is measured on the model on screen is looked up once per model (its header digest in the quality
index, on a worker: nothing runs), so changing -ctk/-ctv re-says the line at once. The quality key
measures the K/V types on screen with the form's flags, as calibration runs (calibration.py): a worker
that posts its progress and its end, one job at a time, cancelled by the same key, Escape, a new model
or quitting. f16/f16 is the reference (0 by definition): nothing to measure. The draft KV (-ctkd/-ctvd)
changes no output, only acceptance, so it is never a quality cost here.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.quality.index import Measured, kv_quality
from tui.core.quality.request import KvPair
from tui.ui.cockpit import measuring
from tui.ui.cockpit.calibrating import model_of
from tui.ui.cockpit.messages import QualityLooked, QualityMeasured, QualityProgressed
from tui.ui.host import Host


class QualityController:
    """What is measured on the model on screen, and the one measurement in flight."""

    def __init__(self, server_bin: Path | None, host: Host, *, fixed: bool = False,
                 measure_fn: measuring.MeasureFn | None = None) -> None:
        """`measure_fn`: the measurement (`measuring.measure_kv` unless a test stubs it: the seam)."""
        self.server_bin, self.host, self.fixed = server_bin, host, fixed
        self.measure_fn = measure_fn or measuring.measure_kv
        self.model: str | None = None  # the model the entries are for
        self.entries: list[Measured] | None = None  # None: the lookup has not answered (or cannot)
        self.why_not = ""  # why the model's header could not be read (no line then)
        self.job = 0  # the newest job's number (a message from an older one is ignored)
        self.running: KvPair | None = None  # the K/V being measured, None when nothing runs
        self.status = ""  # its progress words
        self.notes: dict[KvPair, str] = {}  # why the last try of a K/V gave nothing ("cancelled", an error)
        self._cancel = threading.Event()

    def watch(self, settings: Settings) -> None:
        """The settings on screen: look their model up unless it is the one known (a worker; a new
        model stops a measurement of the old one)."""
        model = model_of(settings)
        if model == self.model or self.fixed:
            return
        if self.running is not None:
            self.cancel()
        self.model, self.entries, self.why_not, self.notes = model, None, "", {}
        if model is None:
            return
        host, server_bin = self.host, self.server_bin

        def work() -> None:
            host.post_message(QualityLooked(model, measuring.look_up(model, server_bin)))

        host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="quality-lookup")

    def looked(self, message: QualityLooked) -> bool:
        """The lookup's answer; whether it is for the model on screen (the line to re-say)."""
        if message.model != self.model:
            return False
        if isinstance(message.result, str):
            self.entries, self.why_not = None, message.result
        else:
            self.entries, self.why_not = list(message.result[1]), ""
        return True

    def line(self, settings: Settings, key: str) -> str:
        """The plan panel's line for the settings on screen ("" when there is nothing to say)."""
        kv = measuring.kv_of(settings)
        if self.running is not None:
            return measuring.line(None, self.running, key, measuring=self.status or "measuring…")
        if model_of(settings) != self.model:
            return ""  # its lookup is on its way
        return measuring.line(self.entries, kv, key, note=self.notes.get(kv, ""))

    def kv_text(self, settings: Settings) -> str:
        """What the K/V types of `settings` cost on their model (`index.kv_quality`), for the screens that
        show a run of them (the MTP verdict); "" while their model's lookup has not answered."""
        if model_of(settings) != self.model or self.entries is None:
            return ""
        return kv_quality(self.entries, measuring.kv_of(settings))

    def toggle(self, settings: Settings) -> str | None:
        """The quality key: cancel the measurement in flight, else measure the K/V types on screen.
        Returns one sentence when nothing starts (the reference, a fixed preview)."""
        if self.running is not None:
            self.cancel()
            return None
        if self.fixed:
            return "this is a fixed preview; nothing runs"
        kv = measuring.kv_of(settings)
        if kv.is_reference:
            return "f16/f16 is the reference: its quality cost is 0 by definition, nothing to measure."
        self.watch(settings)
        self.job += 1
        self.running, self.status, self._cancel = kv, "measuring…", threading.Event()
        self.notes.pop(kv, None)
        job, cancel, host, server_bin, fn = self.job, self._cancel, self.host, self.server_bin, self.measure_fn
        model = self.model

        def work() -> None:
            result = fn(settings, kv, server_bin, cancel, lambda text: host.post_message(QualityProgressed(job, text)))
            host.post_message(QualityMeasured(job, model, kv, result))

        host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="quality")
        return None

    def progressed(self, message: QualityProgressed) -> bool:
        """New progress words; whether they are the running job's (to show)."""
        if message.job != self.job or self.running is None:
            return False
        self.status = measuring.progress_words(message.text, self.running)
        return True

    def finished(self, message: QualityMeasured) -> bool:
        """A measurement ended; whether the line changes (not for a job cancelled for a newer one)."""
        if message.job != self.job:
            return False
        self.running, self.status = None, ""
        if message.model != self.model:
            return True
        if isinstance(message.result, str):
            self.notes[message.kv] = message.result
        else:
            self.entries = list(message.result)
        return True

    def cancel(self) -> bool:
        """Stop the measurement in flight (its pass is killed; its late message is ignored). Returns
        whether one ran."""
        self._cancel.set()
        if self.running is None:
            return False
        self.notes[self.running] = measuring.CANCELLED
        self.job += 1
        self.running, self.status = None, ""
        return True

    def shutdown(self) -> None:
        self.cancel()
