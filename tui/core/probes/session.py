"""Probe a server end to end: launch it (or attach to one), snapshot what surrounds it, run a suite,
record everything in the results store, and stop what was launched.

Used by `mtp-tune probe`, and meant for the TUI and sweeps: one call gives a stored run whatever
happens. A launch that fails is recorded as a failed run with the supervisor's explanation, so the
history keeps the trial and error as well as the successes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tui.core.options import reader
from tui.core.options.argv import settings_from_argv
from tui.core.probes.hygiene import ProbeWarning, check_gpu_snapshot, check_memory_report
from tui.core.results.failed import store_failure
from tui.core.probes.run_types import ProbeRun, ProgressFn, RunConfig, RunContext
from tui.core.probes.runner import run_probe
from tui.core.probes.suites import Suite
from tui.core.options.settings import Settings

#: What `probe -m` adds unless the user's flags say otherwise: one slot (speculative decoding is
#: single-stream), one thread (fast and quiet on CPU test machines; pass -t N when layers or experts
#: run on the CPU), and /metrics (for the verification steps).
DEFAULT_LAUNCH_ARGS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("-np", "--parallel"), ("-np", "1")),
    (("-t", "--threads"), ("-t", "1")),
    (("--metrics",), ("--metrics",)),
)


class ProbeSetupError(RuntimeError):
    """The probe could not start (no server binary, bad flags...); one paragraph for the user."""


def with_defaults(server_args: Sequence[str]) -> list[str]:
    """`server_args` plus DEFAULT_LAUNCH_ARGS for each option the user did not give."""
    out = list(server_args)
    given = {t.option for t in reader.scan(out) if isinstance(t, reader.Occurrence)}
    for names, add in DEFAULT_LAUNCH_ARGS:
        if reader.option_named(names[0]) not in given:
            out += list(add)
    return out


def settings_snapshot(server_args: Sequence[str]) -> tuple[Settings, dict[str, Any], list[str]]:
    """The Settings the args amount to, its stored form (API key redacted), and import problems as text."""
    imp = settings_from_argv(list(server_args), base=Settings(metrics=False))
    return imp.settings, dataclasses.asdict(imp.settings.redacted()), [str(p) for p in imp.problems]


def hardware_snapshot(
    simulate: str | None = None,
    *,
    server_pid: int | None = None,
    memory: dict[str, Any] | None = None,
    model_buffers: dict[str, float] | None = None,
    layers_offloaded: tuple[int, int] | None = None,
) -> tuple[dict[str, Any], list[ProbeWarning]]:
    """GPUs (NVML, or a simulated profile sized by what the server allocated) and host RAM, as stored
    with the run, plus the contamination warnings they imply."""
    from tui.core.gpu import Nvml, ServerView, SimulatedGpus, collect_snapshot

    if simulate:
        alloc = {dev: sum(comp.values()) for dev, comp in ((memory or {}).get("devices") or {}).items()}
        source: Any = SimulatedGpus(simulate, allocated_mib=alloc)
    else:
        source = Nvml(register_atexit=False)
    view = ServerView(pid=server_pid, model_buffers_mib=model_buffers or {}, layers_offloaded=layers_offloaded)
    snap = collect_snapshot(source, server=view)
    return snap.to_dict(), check_gpu_snapshot(snap)


def _server_info(binary: Path) -> dict[str, Any]:
    from tui.core.server.binary import ServerProbeError, probe

    try:
        info = probe(binary)
    except ServerProbeError as exc:
        return {"path": str(binary), "error": str(exc)}
    return {
        "path": str(info.path), "version": info.version, "commit": info.commit, "version_string": info.version_string,
        "built_with": info.built_with, "capabilities": info.capabilities(), "spec_types": list(info.spec_types),
    }


def probe_launched(
    binary: str | Path,
    server_args: Sequence[str],
    suite: Suite,
    config: RunConfig | None = None,
    *,
    store: Any = None,
    label: str | None = None,
    simulate: str | None = None,
    ready_timeout: float = 180.0,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    on_launch: Callable[[Any], None] | None = None,
    apply_defaults: bool = True,
) -> ProbeRun:
    """Launch llama-server with `server_args` under the supervisor, probe it, stop it; returns the run.

    A failed launch returns a run with status `failed` (and is stored) instead of raising.
    """
    from tui.core.server.events import ServerState
    from tui.core.server.supervisor import Supervisor

    args = with_defaults(server_args) if apply_defaults else list(server_args)
    settings_obj, settings, problems = settings_snapshot(args)
    plan_obj, plan_json = predict_memory(settings_obj, simulate)
    config = config or RunConfig()
    binary = Path(binary)
    server = _server_info(binary)
    extra = [ProbeWarning("settings_import", p, "info") for p in problems]
    sup = Supervisor(binary, settings_obj, ready_timeout=ready_timeout)
    try:
        launch = sup.start()
        if on_launch is not None:
            on_launch(sup)
        state = sup.wait_ready()
        memory = sup.memory_snapshot()
        rep = sup.memory_report()
        offloaded = getattr(rep, "offloaded", None)
        buffers = dict(getattr(rep, "weights", {}) or {})
        server["argv"] = _redacted_argv(launch.argv)
        server["log_path"] = str(launch.log_path) if launch.log_path else None
        if state != ServerState.READY:
            failure = sup.failure
            why = failure.explain() if failure else f"llama-server did not become ready (state {state.value})"
            plan_json = reconcile_memory(plan_obj, plan_json, rep)
            return _failed_launch(store, suite, config, settings, server, memory, plan_json, label, why, extra)
        server["seconds_to_ready"] = launch.seconds_to_ready
        hardware, hw_warn = hardware_snapshot(
            simulate, server_pid=sup.pid, memory=memory, model_buffers=buffers, layers_offloaded=offloaded
        )

        def env_check() -> list[ProbeWarning]:
            _, w = hardware_snapshot(
                simulate, server_pid=sup.pid, memory=memory, model_buffers=buffers, layers_offloaded=offloaded
            )
            return w + check_memory_report(rep)

        ctx = RunContext(
            url=launch.url, label=label, model=settings.get("model"), settings=settings,
            configured_parallel=settings.get("parallel"), server=server, hardware=hardware, memory=memory,
            plan=reconcile_memory(plan_obj, plan_json, rep), environment_check=env_check,
            extra_warnings=extra + hw_warn,
        )
        return asyncio.run(
            run_probe(launch.url, suite, config, api_key=sup.api_key, context=ctx, sink=store, progress=progress,
                      cancel=cancel)
        )
    finally:
        sup.close()


def probe_attached(
    url: str,
    suite: Suite,
    config: RunConfig | None = None,
    *,
    store: Any = None,
    label: str | None = None,
    api_key: str | None = None,
    simulate: str | None = None,
    server_pid: int | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> ProbeRun:
    """Probe a server that is already running at `url` (settings unknown: taken from what it reports).

    `server_pid` marks the server's GPU memory as ours; for a server on this machine it is found from
    the listening port when not given."""
    if server_pid is None:
        server_pid = local_listener_pid(url)
    hardware, hw_warn = hardware_snapshot(simulate, server_pid=server_pid)

    def env_check() -> list[ProbeWarning]:
        return hardware_snapshot(simulate, server_pid=server_pid)[1]

    def running() -> Any:  # what the server runs with labels the run (see RunContext.running)
        from tui.core.server.readiness import Readiness

        with Readiness(url, api_key) as probe:
            return probe.running_settings()

    ctx = RunContext(url=url, label=label, hardware=hardware, environment_check=env_check, extra_warnings=hw_warn,
                     running=running, label_of=(lambda rs: label or rs.label()))
    return asyncio.run(
        run_probe(url, suite, config, api_key=api_key, context=ctx, sink=store, progress=progress, cancel=cancel)
    )


def predict_memory(settings: Settings, simulate: str | None = None) -> tuple[Any, dict[str, Any] | None]:
    """The planner's prediction before launch: (Plan or None, its JSON or an error note).

    Devices: the one device list (`planning.devices.devices_now`) over the simulated profile or
    the GPUs NVML sees now (none: CPU only), plus the `--rpc` servers that answer.
    """
    from tui.core.planning.devices import devices_now
    from tui.core.planning.gguf_reader import read_gguf
    from tui.core.planning.plan import plan

    if not settings.model:
        return None, None  # -hf models have no local file to read before the download
    try:
        meta = read_gguf(settings.model)
        ds = devices_now(simulate, list(settings.rpc))
        p = plan(meta, settings, list(ds.devices), ds.host_total_mib, ds.host_free_mib)
        return p, {"prediction": p.to_dict(), **({"unreachable": list(ds.notes())} if ds.unreachable else {})}
    except Exception as exc:  # the probe must not fail because the prediction did
        return None, {"error": f"memory plan unavailable: {exc}"}


def reconcile_memory(plan_obj: Any, plan_json: dict[str, Any] | None, report: Any) -> dict[str, Any] | None:
    """Add predicted-vs-reported differences (tui.core.planning.reconcile) to the stored plan JSON."""
    if plan_obj is None or report is None or plan_json is None:
        return plan_json
    from tui.core.planning.reconcile import reconcile

    try:
        return {**plan_json, "reconciliation": reconcile(plan_obj, report).to_dict()}
    except Exception as exc:
        return {**plan_json, "reconciliation_error": str(exc)}


def local_listener_pid(url: str, proc_root: str | Path = "/proc") -> int | None:
    """The pid of the local process listening on `url`'s port (Linux /proc), or None.

    Reads the listening sockets from /proc/net/tcp{,6} and finds the process holding one of them;
    processes of other users are skipped (their fds are unreadable), so this is best effort."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or parts.port is None:
        return None
    root = Path(proc_root)
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (root / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == parts.port:
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    for pid_dir in root.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(pid_dir.name)
        except OSError:
            continue
    return None


def _redacted_argv(argv: Sequence[str]) -> list[str]:
    from tui.core.options.redact import redact_argv

    return redact_argv(list(argv))


def _failed_launch(
    store: Any, suite: Suite, config: RunConfig, settings: dict[str, Any], server: dict[str, Any],
    memory: dict[str, Any] | None, plan: dict[str, Any] | None, label: str | None, why: str,
    extra: list[ProbeWarning],
) -> ProbeRun:
    from tui.core.probes.records import summarize_run

    summary = summarize_run([])
    run_id = store_failure(store, suite=suite.name, label=label, settings=settings, error=why, plan=plan,
                           config={**config.to_json(), "suite": suite.to_json()}, server=server, memory=memory,
                           summary=summary, warnings=[w.to_json() for w in extra])
    return ProbeRun(run_id, "failed", suite.name, config, [], summary, extra, error=why, server=server)
