"""`llama_server(...)`: a real llama-server for a `with` block, run by the product's Supervisor."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.supervisor_util import FINAL, make_supervisor
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor

BASE_ARGS = ["-c", "4096", "-np", "1", "-t", "1", "-tb", "1", "--metrics"]


@dataclass
class Running:
    url: str
    sup: Supervisor

    @property
    def log(self) -> list[str]:
        return self.sup.tail()

    @property
    def pid(self) -> int:
        return self.sup.pid  # type: ignore[return-value]

    def alive(self) -> bool:
        return self.sup.state == ServerState.READY

    def kill(self) -> None:
        """SIGKILL the server behind the supervisor's back (a crash, as a test sees it)."""
        os.kill(self.pid, signal.SIGKILL)

    def wait_ended(self, timeout: float = 30.0) -> ServerState:
        return self.sup.wait_for(FINAL, timeout)

    def post(self, path: str, body: dict, timeout: float = 60.0) -> dict:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def get(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            return resp.read().decode()


class ServerFailed(RuntimeError):
    def __init__(self, rc: int | None, log: list[str]) -> None:
        super().__init__(f"llama-server exited with {rc}")
        self.rc = rc
        self.log = log


@contextmanager
def llama_server(server: Path, model: Path, extra: list[str], root: Path, timeout: float = 60.0) -> Iterator[Running]:
    """Start llama-server on a free 127.0.0.1 port, wait (bounded) until ready, stop it after."""
    sup = make_supervisor(server, ["-m", str(model), *BASE_ARGS, *extra], root, ready_timeout=timeout,
                          record_history=False)
    try:
        sup.start()
        if sup.wait_ready(timeout + 10) != ServerState.READY:
            sup.wait_for(FINAL, 10)
            launch = sup.launch
            raise ServerFailed(launch.exit_code if launch else None, sup.tail())
        yield Running(sup.base_url, sup)  # type: ignore[arg-type]
    finally:
        sup.close()
