"""A run that failed before any measurement, written to the results store (`store_failure`).

Why one function beside the store: the sweep, the A/B and the cockpit's own probe each wrote a failed
run by hand (`begin_run` + `finish_run("failed")`), with different fields and different error handling;
it sits with the store (below the probes and the lab) so both can use it.
"""

from __future__ import annotations

from typing import Any

from tui.core.options.settings import Settings, mtp_from_settings, settings_json


def store_failure(store: Any, *, suite: str, label: str | None, settings: Settings | dict[str, Any], error: str,
                  plan: dict[str, Any] | None = None, config: dict[str, Any] | None = None,
                  summary: dict[str, Any] | None = None, warnings: list[Any] | None = None,
                  **extra: Any) -> int | None:
    """The one place a failed run (no measurement) is written to the results store; its id, or None
    without a store or when the store refuses (a record, never a reason to stop). `settings`: the
    launch's `Settings` (redacted here) or its JSON, already redacted; `extra`: more `begin_run`
    fields (server, memory); `summary`/`warnings`: what `finish_run` keeps beside the error."""
    if store is None:
        return None
    if isinstance(settings, Settings):
        model, mtp, settings = settings.model, settings.mtp_enabled, settings_json(settings.redacted(), only_set=False)
    else:
        model, mtp = settings.get("model"), mtp_from_settings(settings)
    try:
        rid = store.begin_run(suite=suite, label=label, model=model, mtp=mtp, settings=settings, config=config or {},
                              plan=plan, **extra)
        store.finish_run(rid, "failed", error=error, **({"summary": summary} if summary is not None else {}),
                         **({"warnings": warnings} if warnings is not None else {}))
        return int(rid)
    except Exception:  # noqa: BLE001 - the store is a record, not a reason to lose the experiment
        return None
