"""Where a tune is kept between runs: the sweep's resumable state file, one per tune id.

Why the sweep's store: it already writes atomically after every row, locks against a second
process and survives Ctrl-C, a crash or a reboot. A tune's rows are its records (`TrialRecord
.to_row()`, read back with `from_row`), keyed by launch key; the findings hold what is not a
candidate: the suite's token counts (the sizing launch) and the final A/B's samples. Tune states
live in `data_dir()/tunes/`, apart from the sweeps, so neither lists the other's.

The tune id hashes what decides the answer: the fixed flags, the workload (a suite's prompts, not
its name), the floors and searched values, the model file (path, size, mtime) and the hardware (the
device list the candidates are planned against). The budget is not in it: a second run with a
larger budget continues the first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tui.core.config.paths import data_dir
from tui.core.config.jsonshape import ShapeError, check, fields
from tui.core.options.settings import Settings
from tui.core.sweep.definition import settings_json, settings_key
from tui.core.sweep.state import StateError, SweepLock, SweepState, load_state, open_state
from tui.core.tuning.space import Floors
from tui.core.tuning.trials import TrialRecord
from tui.core.tuning.tune_workload import WorkloadSpec
from tui.core.tuning.verdict import MtpVerdict, PassSample
from tui.core.tuning.workload import Workload


def tunes_dir() -> Path:
    return data_dir() / "tunes"


def model_identity(path: str | None) -> dict[str, Any]:
    """The model file as a tune id sees it: a changed file is a new tune."""
    if not path:
        return {}
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return {"path": str(p)}
    return {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def hardware_identity(devices: Any, gpus: str | None) -> dict[str, Any]:
    """The device list (a `planning.devices.DeviceSet`) by name and size, and how it was chosen."""
    devs = [[d.key, round(float(d.total_mib or 0))] for d in getattr(devices, "devices", ())]
    return {"gpus": gpus, "source": getattr(devices, "source", ""), "devices": devs}


def tune_definition(base: Settings, spec: WorkloadSpec, floors: Floors, values: Mapping[str, Sequence[Any]],
                    hardware: Mapping[str, Any], *, rungs: Sequence[int], strategy: str) -> dict[str, Any]:
    """What the tune id hashes, stored with the state for people reading it."""
    return {"kind": "tune", "model": model_identity(base.model), "base_key": settings_key(base),
            "base": settings_json(base.redacted()), "workload": spec.identity(), "workload_text": spec.text,
            "floors": {"kv": floors.kv, "draft_kv": floors.draft_kv, "min_ctx": floors.min_ctx},
            "values": {k: list(v) for k, v in sorted(values.items())}, "hardware": dict(hardware),
            "rungs": list(rungs), "strategy": strategy}


def tune_id(definition: Mapping[str, Any]) -> str:
    ident = {k: v for k, v in definition.items() if k not in ("base", "workload_text")}
    return "tune-" + hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:12]


class TuneState:
    """One tune's saved records and findings (`open()` resumes; `fresh` forgets)."""

    def __init__(self, state: SweepState, root: Path) -> None:
        self.state, self.root = state, root
        self._lock = SweepLock(state.sweep_id, root)

    @classmethod
    def open(cls, definition: dict[str, Any], *, root: Path | None = None, fresh: bool = False) -> TuneState:
        root = root or tunes_dir()
        tid = tune_id(definition)
        old = None if fresh else load_state(tid, root)  # StateError: unreadable, said in one sentence
        st = open_state(tid, definition, root, fresh=fresh)
        if old is not None:
            st.findings = old.findings
            _check_loaded(st)
        return cls(st, root)

    @property
    def tune_id(self) -> str:
        return self.state.sweep_id

    def lock(self) -> None:
        """Refuse a second process on the same tune (StateError naming the holder)."""
        self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    def previous(self) -> list[TrialRecord]:
        out = [TrialRecord.from_row(r) for r in self.state.rows.values()]
        return [r for r in out if r is not None]

    def record(self, rec: TrialRecord) -> None:
        self.state.record(rec.to_row())

    def save(self) -> Path:
        return self.state.save()

    def _finding(self, kind: str, **match: Any) -> dict[str, Any] | None:
        for f in self.state.findings:
            if f.get("kind") == kind and all(f.get(k) == v for k, v in match.items()):
                return f
        return None

    def _put(self, kind: str, entry: dict[str, Any], **match: Any) -> None:
        self.state.findings = [f for f in self.state.findings
                               if not (f.get("kind") == kind and all(f.get(k) == v for k, v in match.items()))]
        self.state.findings.append({"kind": kind, **match, **entry})

    def workload(self) -> Workload | None:
        f = self._finding("workload")
        return Workload.from_json(f["workload"]) if f else None

    def set_workload(self, w: Workload) -> None:
        self._put("workload", {"workload": w.to_json()})

    def ab(self, on_key: str, off_key: str, passes: int) -> MtpVerdict | None:
        f = self._finding("ab", on=on_key, off=off_key, passes=passes)
        if f is None or (f.get("verdict") or {}).get("status") != "complete":
            return None
        return MtpVerdict.from_json(f["verdict"])

    def set_ab(self, on_key: str, off_key: str, passes: int, v: MtpVerdict) -> None:
        self._put("ab", {"verdict": v.to_json()}, on=on_key, off=off_key, passes=passes)

    def prompt(self) -> str | None:
        """The raw prompt a shape workload was cut into (so a resumed tune probes the same text)."""
        f = self._finding("prompt")
        return str(f["text"]) if f else None

    def set_prompt(self, text: str) -> None:
        self._put("prompt", {"text": text})

    @property
    def path(self) -> Path | None:
        return self.state.path

    def add_launches(self, n: int) -> None:
        self.state.launches += n


def _check_loaded(st: SweepState) -> None:
    """Read every record and finding of a loaded tune state back once, so that a damaged file is
    refused when it is opened (StateError naming it and what to do), not by a TypeError midway."""
    try:
        for row in st.rows.values():
            TrialRecord.from_row(row)
        for i, f in enumerate(st.findings):
            check(f, dict[str, Any], f"findings[{i}]")
            kind, where = f.get("kind"), f"findings[{i}]"
            if kind == "workload":
                fields(Workload, f.get("workload"), f"{where}.workload", required=("label", "in_tokens", "out_tokens", "longest"))
            elif kind == "prompt":
                check(f.get("text"), str, f"{where}.text")
            elif kind == "ab":
                _check_verdict(f.get("verdict"), f"{where}.verdict")
    except ShapeError as e:
        raise StateError(f"the tune state {st.path} is damaged ({e}); delete it, or run the tune with --fresh, "
                         "to start it over.") from None


def _check_verdict(v: Any, where: str) -> None:
    """A stored A/B verdict (`MtpVerdict.to_json`) in the shape `MtpVerdict.from_json` reads."""
    check(v, dict[str, Any], where)
    check(v.get("samples") or [], list[PassSample], f"{where}.samples")
    for s in v.get("samples") or []:
        fields(PassSample, s, f"{where}.samples[]", required=("side", "index", "order"))
    check(v.get("workload") or {}, dict[str, int], f"{where}.workload")
    check(v.get("status", "complete"), str, f"{where}.status")
    check(v.get("error"), str | None, f"{where}.error")
    check(v.get("settings"), dict[str, Any] | None, f"{where}.settings")
    check(v.get("run_ids") or [], list[int], f"{where}.run_ids")
