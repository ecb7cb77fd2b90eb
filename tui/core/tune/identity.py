"""What makes two tunes the same tune (its id), and the deep check of a tune's journal section.

Why the id hashes what it hashes: the fixed flags, the workload (a suite's prompts, not its name),
the floors and searched values, the model file (path, size, mtime) and the hardware (the device list
the candidates are planned against) decide the answer; so do the KLD budget, the model files of a
file axis and the reference they are measured against (`quality`, only when asked, so the ids of
tunes without it stay what they were). The budget is not in it: a second run with a
larger budget continues the first. The tune's journal (`lab.journal`, kind "tune") is named by it.

`check_section` reads the tune's own data back once when its journal is opened, so a damaged file is
refused then (in the journal's one sentence naming it), not by a TypeError midway through a tune. It
lives here, not in the journal, because the journal sits below the tune's types.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tui.core.config.jsonshape import check, fields
from tui.core.lab.journal import Journal
from tui.core.options.settings import Settings, settings_json
from tui.core.sweep.definition import settings_key
from tui.core.tune.space import Floors
from tui.core.tune.workload import Workload, WorkloadSpec
from tui.core.lab.ranking import PassSample


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
                    hardware: Mapping[str, Any], *, rungs: Sequence[int], quality: Any = None) -> dict[str, Any]:
    """What the tune id hashes, stored in the journal for people reading it ("strategy" stays
    "search", the only one, so the ids of earlier tunes still resume). `quality`: a `kld.QualityAsk`."""
    more: dict[str, Any] = {} if quality is None else {"quality": {
        "max_kld": quality.max_kld, "reference": model_identity(str(quality.reference)),
        "files": [model_identity(str(f)) for f in quality.files], "text": quality.text.digest}}
    return {**more, "kind": "tune", "model": model_identity(base.model), "base_key": settings_key(base),
            "base": settings_json(base.redacted()), "workload": spec.identity(), "workload_text": spec.text,
            "floors": {"kv": floors.kv, "draft_kv": floors.draft_kv, "min_ctx": floors.min_ctx},
            "values": {k: list(v) for k, v in sorted(values.items())}, "hardware": dict(hardware),
            "rungs": list(rungs), "strategy": "search"}


def tune_id(definition: Mapping[str, Any]) -> str:
    ident = {k: v for k, v in definition.items() if k not in ("base", "workload_text")}
    return "tune-" + hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:12]


def check_section(j: Journal) -> None:
    """ShapeError naming the first part of the tune's section that its readers could not read."""
    t = j.tune
    if t.workload is not None:
        fields(Workload, t.workload, "tune.workload", required=("label", "in_tokens", "out_tokens", "longest"))
    for i, a in enumerate(t.ab):
        _check_verdict(a.verdict, f"tune.ab[{i}].verdict")


def _check_verdict(v: Any, where: str) -> None:
    """A stored A/B verdict (`AbVerdict.to_json`) in the shape `AbVerdict.from_json` reads."""
    check(v, dict[str, Any], where)
    check(v.get("samples") or [], list[PassSample], f"{where}.samples")
    for s in v.get("samples") or []:
        fields(PassSample, s, f"{where}.samples[]", required=("side", "index", "order"))
    check(v.get("workload") or {}, dict[str, int], f"{where}.workload")
    check(v.get("status", "complete"), str, f"{where}.status")
    check(v.get("error"), str | None, f"{where}.error")
    check(v.get("settings"), dict[str, Any] | None, f"{where}.settings")
    check(v.get("run_ids") or [], list[int], f"{where}.run_ids")
