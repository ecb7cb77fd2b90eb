"""The real server's verdict on a preset file: does llama-server's router accept it?

The check runs through the Supervisor like every other launch (own process group, parent-death
signal, stopped with its children), so a killed mtp-tune never leaves a router behind.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.server.failures import FailureKind
from tui.core.server.process import child_env
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor

_STARTUP_KEY = re.compile(r"^((?:load-on-startup|__PRESET_LOAD_ON_STARTUP)[ \t]*+=[ \t]*+)[^;#\r\n]*", re.M)


def check_with_server(server: str | os.PathLike[str], path: str | os.PathLike[str], timeout: float = 20.0) -> tuple[bool, str]:
    """Start `server` in router mode on a copy of the preset and report (accepted, message).

    No model is loaded: the copy has `load-on-startup` switched off (same line numbers; the
    emulated check covers the startup limit) and the router runs with `--no-models-autoload`, an
    empty `LLAMA_CACHE`, a private `XDG_CONFIG_HOME` and no `LLAMA_ARG_*`. Every wait is bounded
    by `timeout`.
    """
    src = Path(path)
    text = src.read_bytes().decode("utf-8", errors="surrogateescape")
    with tempfile.TemporaryDirectory(prefix="mtp-tune-check-") as tmp:
        copy = Path(tmp) / src.name
        copy.write_bytes(_STARTUP_KEY.sub(lambda m: m.group(1) + "false", text).encode("utf-8", errors="surrogateescape"))
        env = child_env()
        env["XDG_CONFIG_HOME"] = str(Path(tmp) / "xdg")
        env["LLAMA_CACHE"] = str(Path(tmp) / "cache")
        router = Settings(metrics=False, extra_args=["--models-preset", str(copy), "--no-models-autoload"])
        sup = Supervisor(server, router, env=env,
                         ready_timeout=timeout, stop_grace=5.0, log_dir=Path(tmp) / "logs", record_history=False,
                         memreport_factory=None, cwd=src.parent if src.parent.is_dir() else None)
        try:
            sup.start()
            state = sup.wait_ready(timeout + 10.0)
            if state == ServerState.READY:
                return True, "llama-server loaded the preset and started in router mode."
            if not state.final:
                sup.stop()
            launch = sup.launch
            lines = launch.head if launch is not None else []
            lines = lines + [ln for ln in sup.tail() if ln not in lines]
            if launch is not None and launch.failure is not None and launch.failure.kind == FailureKind.READY_TIMEOUT:
                return False, f"llama-server did not finish reading the preset within {timeout:.0f} s."
            why = next((ln.split("llama_server: ", 1)[-1] for ln in lines if "failed to initialize router" in ln),
                       None) or next((ln.split("llama_server: ", 1)[-1] for ln in lines if " E " in ln), None)
            if why is None:
                code = launch.exit_code if launch is not None else None
                why = f"llama-server exited with status {code}: {' | '.join(lines[-3:])}"
            return False, why.replace(str(copy), str(src))
        finally:
            sup.close()
