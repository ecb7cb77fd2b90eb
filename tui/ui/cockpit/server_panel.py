"""Server control: state, launch/restart/stop buttons, the model's download (`-hf`, `-mu`), the
explained failure, the log tail, and predicted-vs-reported memory after a launch. Buttons run App
actions; the App calls `show()`."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.markup import escape
from textual.widgets import Button, Static

from tui.core.config.text import safe_text
from tui.ui.format import markup_safe, mib_short, plain
from tui.ui.cockpit.views import ServerStatus
from tui.ui.cockpit.settings_fields import ALL_FIELDS

DOWNLOAD_BAR_CELLS = 12
COMPONENT_NAMES = {"kv": "KV", "draft_kv": "draft KV", "draft_compute": "draft compute"}
STATE_STYLE = {
    "stopped": "dim", "starting": "warn", "loading": "warn", "ready": "ok", "stopping": "warn",
    "exited": "dim", "failed": "bad", "attached": "ok", "unreachable": "bad",
}


class ServerPanel(Vertical):
    """Shows a `ServerStatus`; sends no messages of its own (its buttons run app actions)."""

    DEFAULT_CSS = """
    ServerPanel { height: auto; border: round $foreground 25%; padding: 0 1; }
    ServerPanel > #server-head { height: 1; }
    ServerPanel > #server-buttons { height: 1; margin-top: 0; }
    ServerPanel Button { margin-right: 1; min-width: 0; width: auto; }
    ServerPanel Button:focus { text-style: bold reverse; }
    ServerPanel > #server-failure { display: none; color: $error; height: auto; border-left: thick $error; padding-left: 1; }
    ServerPanel > #server-failure.-shown { display: block; }
    ServerPanel > #server-log { height: 4; color: $foreground-muted; background: $surface; text-wrap: nowrap; text-overflow: ellipsis; }
    ServerPanel > #server-reconcile { height: auto; color: $foreground-muted; }
    ServerPanel > #server-running { display: none; height: auto; color: $accent; }
    ServerPanel > #server-running.-shown { display: block; }
    ServerPanel > #server-download { display: none; height: auto; color: $foreground-muted; }
    ServerPanel > #server-download.-shown { display: block; }
    ServerPanel > #server-download.-active { color: $accent; }
    ServerPanel .state-ok { color: $success; }
    ServerPanel .state-warn { color: $warning; }
    ServerPanel .state-bad { color: $error; }
    ServerPanel .state-dim { color: $foreground-muted; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="server-head")
        with Horizontal(id="server-buttons"):
            yield Button("Launch \\[l]", id="launch", action="app.launch", variant="success", compact=True)
            yield Button("Restart \\[r]", id="restart", action="app.restart", variant="warning", compact=True)
            yield Button("Stop \\[s]", id="stop", action="app.stop_server", variant="error", compact=True)
            yield Button("Log \\[o]", id="raw-log", action="app.raw_log", compact=True)
        yield Static("", id="server-running")
        yield Static("", id="server-download")
        yield Static("", id="server-failure")
        yield Static("", id="server-log")
        yield Static("", id="server-reconcile")

    def on_mount(self) -> None:
        self.border_title = "Server"
        self.show(ServerStatus())

    def show(self, status: ServerStatus, restart_needed: frozenset[str] = frozenset()) -> None:
        state = status.state
        var = {"ok": "$success", "warn": "$warning", "bad": "$error", "dim": "$foreground-muted"}[
            STATE_STYLE.get(state, "dim")
        ]
        head = f"[bold {var}]● {escape(state.upper())}[/]"
        if status.attached:
            head += "  [bold]attached[/]"
        if status.url and (status.alive or status.attached):
            head += f"  {markup_safe(status.url)}"
        if status.pid:
            head += f"  pid {status.pid}"
        if restart_needed and status.alive:
            names = sorted(ALL_FIELDS[n].label for n in restart_needed if n in ALL_FIELDS)
            shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
            head += f"  [$warning]↻ restart needed: {escape(shown)}[/]"
        self.query_one("#server-head", Static).update(head)
        alive = status.alive
        self.query_one("#launch", Button).disabled = alive or status.attached
        self.query_one("#restart", Button).disabled = status.attached or not (alive or state in ("failed", "exited"))
        self.query_one("#stop", Button).disabled = status.attached or not alive
        running = self.query_one("#server-running", Static)
        running.update(plain(status.running, keep_lines=True))  # the model's file name
        running.set_class(bool(status.running), "-shown")
        download = self.query_one("#server-download", Static)
        download.update(plain(self._download_text(status), keep_lines=True))
        download.set_class(bool(status.download), "-shown")
        download.set_class(status.downloading, "-active")
        failure = self.query_one("#server-failure", Static)
        failure.update(plain(status.failure or "", keep_lines=True))  # it quotes the server's own lines
        failure.set_class(bool(status.failure), "-shown")
        tail = status.log_tail[-4:]
        self.query_one("#server-log", Static).update(
            plain("\n".join(safe_text(line[:300]) for line in tail) if tail else "(no server output yet)", keep_lines=True)
        )
        self.query_one("#server-reconcile", Static).update(Content(self._reconcile_text(status)))

    @staticmethod
    def _download_text(status: ServerStatus) -> str:
        """`▕██████░░░░▏ downloading FILE 42% (...)` while it runs (the bar when the total is known)."""
        if not status.download:
            return ""
        frac = status.download_fraction
        if not status.downloading or frac is None:
            return ("⬇ " if status.downloading else "") + status.download
        cells = round(frac * DOWNLOAD_BAR_CELLS)
        return f"▕{'█' * cells}{'░' * (DOWNLOAD_BAR_CELLS - cells)}▏ {status.download}"

    @staticmethod
    def _reconcile_text(status: ServerStatus) -> str:
        if not status.reconcile:
            return "predicted vs reported memory: shown once a launch is ready"
        by_device: dict[str, list[str]] = {}
        for row in status.reconcile:
            err = row.error_percent
            note = f" ({err:+.0f} %)" if err is not None and abs(err) >= 1 else ""
            name = COMPONENT_NAMES.get(row.component, row.component)
            by_device.setdefault(row.device, []).append(
                f"{name} {mib_short(row.predicted_mib)}→{mib_short(row.reported_mib)}{note}"
            )
        lines = [f"{dev}: " + " · ".join(parts) for dev, parts in by_device.items()]
        return "predicted→reported MiB  " + "\n".join(lines)
