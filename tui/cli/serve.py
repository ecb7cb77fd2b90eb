"""Run llama-server under mtp-tune's supervisor: `mtp-tune serve -m FILE [llama-server flags]`.

Every argument mtp-tune does not know is llama-server's: read into Settings by the one argv reader
(bad values and options llama-server does not have refused, exit 2; removed flags translated with
a warning), which the supervisor runs. The server listens on
127.0.0.1 and a free port unless --host/--port are given, logs at `-lv 4` to a file per launch, and
dies with this command (Ctrl-C, SIGTERM, or even SIGKILL of mtp-tune). State changes are printed;
a failure is explained in one paragraph with the flag or file at fault and the full log's path.
A model that llama-server downloads (`-hf`, `-mu URL -m PATH`) prints its progress on stderr, a line
every few seconds; the totals come from mtp-tune's cache of the model (a `plan` of it, no request).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tui.core.config.text import safe_text
from tui.core.options import reader
from tui.cli._common import ServerArgsError, check_server_args, fail, pass_unknown_to_server, server_or_fail
from tui.core.options.settings import Settings
from tui.core.server.download import describe, file_name
from tui.core.server.download_watch import Downloads
from tui.core.server.failures import Failure
from tui.core.server.events import LogLine, ServerState, StateEvent
from tui.core.server.supervisor import Supervisor, SupervisorError

COMMAND = "serve"
DOWNLOAD_LINE_EVERY_S = 5.0
HELP = "run llama-server under the supervisor (every other flag is llama-server's, checked first)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-bin", metavar="PATH", help="llama-server binary (default: found or built by mtp-tune)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S",
                   help="seconds to wait for the model to load (default 180)")
    p.add_argument("--stop-grace", type=float, default=5.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL when stopping (default 5)")
    p.add_argument("--router-model", metavar="NAME",
                   help="with --models-preset: the preset section to load; ready when it reports 'loaded'")
    p.add_argument("--show-log", action="store_true", help="echo the server's log lines to stderr")
    p.add_argument("--keep-llama-env", action="store_true",
                   help="pass LLAMA_ARG_* environment variables to the server (default: stripped)")
    pass_unknown_to_server(p)


def _printer(t0: float) -> Any:
    def on_state(ev: StateEvent) -> None:
        dt = ev.at - t0
        extra = f": {safe_text(ev.detail)}" if ev.state == ServerState.STARTING and ev.detail else ""
        print(f"[{dt:7.2f} s] {ev.state.value}{extra}", flush=True)

    return on_state


def _download_printer(t0: float) -> Callable[[Downloads], None]:
    """Progress on stderr: the first news, then a line every DOWNLOAD_LINE_EVERY_S s, and the end once
    (called from the download thread, and by `run` once the server is ready)."""
    last: dict[str, Any] = {"at": 0.0, "phase": None}
    lock = threading.Lock()

    def on_download(dl: Downloads) -> None:
        s = dl.summary()
        now = time.monotonic()
        with lock:
            if s is None or last["phase"] in ("done", "gone") or (
                    s.phase == last["phase"] and now - last["at"] < DOWNLOAD_LINE_EVERY_S):
                return
            last.update(at=now, phase=s.phase)
            print(f"[{now - t0:7.2f} s] {safe_text(describe(s))}", file=sys.stderr, flush=True)

    return on_download


def _planned_sizes(settings: Settings) -> tuple[dict[str, int], int | None]:
    """The download's sizes from mtp-tune's own cache (a header or Hub listing read by `plan`), no
    request: ({file name: bytes}, the split set's total); empty when nothing is cached."""
    from tui.core.remote import cache, hub

    try:
        if settings.hf_repo:
            repo, tag = hub.split_repo_tag(settings.hf_repo)
            rec = cache.load_listing(f"{hub.endpoint()}|{repo}")
            files = [hub.HubFile(f["path"], int(f["size"])) for f in rec["files"]] if rec else []
            chosen = hub.resolve_files(files, repo, tag, reader.value(list(settings.extra_args), "--hf-file") or "")
            side = hub.sidecars(files, chosen[0].path, tag, hub.sidecar_options(settings))  # downloaded with it
            return {f.path.rsplit("/", 1)[-1]: f.size for f in [*chosen, *side]}, None
        url = reader.value(list(settings.extra_args), "--model-url")
        hit = cache.lookup(f"url|{url}") if url else None
        if hit is not None:
            return {file_name(u): n for u, n in zip(hit.urls, hit.sizes)}, hit.total_size
    except (ValueError, KeyError, TypeError):
        pass  # nothing cached (or not in the shape expected): bytes only
    return {}, None


def run(args: argparse.Namespace) -> int:
    server_args: list[str] = list(args.server_args)
    if not any(reader.occurrences(server_args, n) for n in ("--model", "--hf-repo", "--models-preset")):
        return fail("serve needs a model: `mtp-tune serve -m FILE.gguf [llama-server flags]` "
                    "(or --models-preset FILE.ini --router-model NAME for router mode).")
    try:
        # The one reader and the form's validator: bad values are refused before launching; the
        # Settings are what the supervisor runs (and what history records), so warnings are shown.
        settings = check_server_args(server_args, base=Settings(metrics=False))
    except ServerArgsError as e:
        return fail(str(e))
    server = server_or_fail(args.server_bin)
    if isinstance(server, int):
        return server
    sup = Supervisor(server.path, settings, ready_timeout=args.ready_timeout, stop_grace=args.stop_grace,
                     router_model=args.router_model, keep_llama_env=args.keep_llama_env)
    t0 = time.monotonic()
    sup.add_state_listener(_printer(t0))
    if args.show_log:
        sup.add_log_listener(lambda ln: print(safe_text(ln.text), file=sys.stderr, flush=True)
                             if isinstance(ln, LogLine) else None)  # a server line may carry escapes
    on_download = _download_printer(t0)
    sup.add_download_listener(on_download)
    try:
        launch = sup.start()
        if launch.downloads is not None:
            launch.downloads.expect(*_planned_sizes(settings))
        sup.events.flush()
        if launch.log_path:
            print(f"log: {launch.log_path}", flush=True)
        state = sup.wait_ready()
        if launch.downloads is not None:
            on_download(launch.downloads)  # its end, before "ready at" (the download thread may be a poll behind)
        if state == ServerState.READY:
            took = launch.seconds_to_ready or 0.0
            sup.events.flush()
            print(f"ready at {launch.url} after {took:.2f} s (pid {launch.pid}); Ctrl-C stops it.", flush=True)
            while not sup.wait_for([ServerState.STOPPED, ServerState.EXITED, ServerState.FAILED], 3600.0).final:
                pass
        return _report(sup, sup.failure)
    except KeyboardInterrupt:
        code = sup.stop()
        sup.events.flush()
        print(f"stopped (exit code {code}).", flush=True)
        return 0
    except SupervisorError as e:
        return fail(str(e))
    finally:
        sup.close()


def _report(sup: Supervisor, failure: Failure | None) -> int:
    sup.events.flush()
    if failure is None:
        return 0
    print(f"mtp-tune: {safe_text(failure.explain(), keep_lines=True)}", file=sys.stderr, flush=True)
    return 0 if sup.state == ServerState.EXITED else 1
