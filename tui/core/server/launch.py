"""One start of llama-server, as data: what it ran, where it listens, its log and how it ended."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from tui.core.config.endpoint import on_hub
from tui.core.config.text import safe_text
from tui.core.options.argv import settings_to_argv
from tui.core.options.reader import occurrences, value, without
from tui.core.options.redact import env_secrets
from tui.core.options.settings import Settings
from tui.core.server.download_watch import Downloads
from tui.core.server.failures import Failure, FailureKind
from tui.core.server.keyfile import KeyFile

#: The options that make llama-server download from a URL. b11434 sends its Hugging Face token as
#: the bearer of those downloads wherever they point (common/arg.cpp `opts.bearer_token`,
#: download.cpp), so a launch naming one off the Hub endpoint's origin gets no HF_TOKEN.
URL_DOWNLOAD_OPTIONS = ("--model-url", "--mmproj-url")
#: Lines kept from the start of each launch for classification (argument and load errors come first).
HEAD_LINES = 400
VERBOSITY_OPTIONS = ("-lv", "-v")  # any spelling of either (the reader knows them all)
# b11434 (server.cpp): /health answers 200, then "model loaded", then the SIGTERM handler, then
# "listening on", then start_loop(). A SIGTERM before start_loop() runs is lost (terminate() is undone
# by start_loop's `running = true`), so READY waits (bounded) for the loop's first trace line: a stop()
# right after READY is then a clean shutdown, not a hang until SIGKILL.
_LISTENING = re.compile(r"llama_server: listening on ")
_SERVING = re.compile(r"update_slots: all slots are idle")
_ROUTER_SPAWN = re.compile(r"spawning server instance with name=(\S+) on port (\d+)")
_ROUTER_EXIT = re.compile(r"instance name=(\S+) exited with status (-?\d+)")


def launch_argv(binary: str | Path, settings: Settings) -> tuple[list[str], str, int | None]:
    """The argv a launch of `settings` runs (log flags added, `--host`/`--port` taken out, no secret)
    and its host and port (None: pick a free one).

    The argv is built here, at spawn, from the Settings the supervisor carries; no secret is in it:
    the API key goes through a 0600 `--api-key-file` (`keyfile`), the Hugging Face token through the
    child's environment (`secret_env`). `--host`/`--port` kept verbatim in `extra_args` win, as
    llama-server's last-value rule says; a bad port is a ValueError naming it."""
    given, _ = env_secrets(settings_to_argv(replace(settings, api_key=None)))
    host = value(given, "--host") or "127.0.0.1"
    port_s = value(given, "--port")
    rest = without(given, "--host", "--port")
    try:
        port = int(port_s) if port_s else None
    except ValueError:
        raise ValueError(f"--port {port_s}: not a port number; give 1-65535 or leave it out "
                         "so mtp-tune picks a free port.") from None
    argv = [str(binary), *rest]
    if not any(occurrences(rest, f) for f in VERBOSITY_OPTIONS):
        argv += ["-lv", "4"]
    if not occurrences(rest, "--log-colors"):
        argv += ["--log-colors", "off"]
    return argv, host, port


def secret_env(settings: Settings) -> dict[str, str]:
    """The secrets a launch of `settings` passes in its child's environment instead of the argv
    (`-hft TOKEN` -> HF_TOKEN): an environment is readable by its owner only, an argv by anyone."""
    return env_secrets(settings.extra_args)[1]


def off_hub_url(settings: Settings) -> str | None:
    """The first URL a launch of `settings` downloads from that lies off the Hub endpoint's origin
    (`-mu`, `-mmu`), or None: llama-server would send HF_TOKEN to that host."""
    for opt in URL_DOWNLOAD_OPTIONS:
        url = value(list(settings.extra_args), opt)
        if url and not on_hub(url):
            return url
    return None


def withhold_token(env: dict[str, str], settings: Settings) -> str | None:
    """Take HF_TOKEN (given by `-hft` or inherited) out of a child's `env` when the launch downloads
    from a host that is not the Hub; returns that host, made safe to print (for the launch log), else None."""
    url = off_hub_url(settings)
    if url is None or env.pop("HF_TOKEN", None) is None:
        return None
    return safe_text(urlsplit(url).netloc or url)[:200]


@dataclass
class Launch:
    """One start of the server: argv, where it listens, its log, timings and how it ended."""

    id: int
    argv: list[str]
    host: str
    port: int
    log_path: Path | None
    started_at: float  # time.monotonic()
    started_wall: float  # time.time()
    router_model: str | None = None
    settings: Settings = field(default_factory=Settings)  # what was asked for: the argv is built from it
    key_file: KeyFile | None = field(default=None, repr=False)  # the API key's 0600 file while it runs
    downloads: Downloads | None = field(default=None, repr=False)  # what -hf/-mu fetch (None: a model on disk)
    token_given: bool = False  # a Hugging Face token reached the server (HF_TOKEN in its environment)
    pid: int | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    stop_requested: bool = False
    auto_port: bool = False
    port_retries: int = 0
    exited: threading.Event = field(default_factory=threading.Event, repr=False)
    loaded_line: threading.Event = field(default_factory=threading.Event, repr=False)
    wake: threading.Event = field(default_factory=threading.Event, repr=False)  # poll /health now
    head: list[str] = field(default_factory=list, repr=False)
    n_lines: int = 0
    router_ports: dict[str, str] = field(default_factory=dict, repr=False)
    router_exits: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # name -> (status, line no)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def seconds_to_ready(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.started_at

    def note_line(self, text: str) -> int | None:
        """Count and keep a log line; returns the exit status when it says the router model's child died."""
        self.n_lines += 1
        if len(self.head) < HEAD_LINES:
            self.head.append(text)
        if _LISTENING.search(text):
            self.wake.set()
        elif _SERVING.search(text) and not self.loaded_line.is_set():
            self.loaded_line.set()
            self.wake.set()
        if not self.router_model:
            return None
        m = _ROUTER_SPAWN.search(text)
        if m:
            self.router_ports[m.group(1)] = m.group(2)
        m = _ROUTER_EXIT.search(text)
        if m:
            self.router_exits[m.group(1)] = (int(m.group(2)), self.n_lines)
            if m.group(1) == self.router_model and int(m.group(2)) != 0:
                return int(m.group(2))
        return None

    def remove_key_file(self) -> None:
        """The launch has ended (or never started): its key file goes (idempotent)."""
        if self.key_file is not None:
            self.key_file.remove()

    def router_child_lines(self, lines: list[str]) -> list[str]:
        """The lines of the router model's own child (prefixed `[port] `), or all of them."""
        port = self.router_ports.get(self.router_model or "")
        if port is None:
            return lines
        return [ln for ln in lines if ln.startswith(f"[{port}] ")] or lines


def spawn_failure(binary: Path, e: BaseException, log_path: Path | None) -> Failure:
    """Why the binary could not even be started, as a Failure the UI explains."""
    if isinstance(e, FileNotFoundError):
        msg = f"The llama-server binary {binary} does not exist."
    elif isinstance(e, PermissionError):
        msg = f"The llama-server binary {binary} is not executable (permission denied)."
    else:
        msg = f"llama-server ({binary}) could not be started: {e}."
    return Failure(FailureKind.SERVER_NOT_FOUND, msg, str(binary),
                   "Point mtp-tune at a working llama-server (--server-bin, $MTP_TUNE_LLAMA_SERVER) or let it "
                   "build one.", raw_log_path=log_path)
