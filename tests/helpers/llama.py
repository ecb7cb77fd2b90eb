"""A minimal real-llama-server launcher for foundation tests (the product's supervisor has its own tests)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import server_env

LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
BASE_ARGS = ["--host", "127.0.0.1", "--port", "0", "-c", "4096", "-np", "1", "-t", "1", "-tb", "1", "--metrics"]


@dataclass
class Running:
    url: str
    proc: subprocess.Popen[str]
    log: list[str]

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
    def __init__(self, rc: int, log: list[str]) -> None:
        super().__init__(f"llama-server exited with {rc}")
        self.rc = rc
        self.log = log


@contextmanager
def llama_server(server: Path, model: Path, extra: list[str], root: Path, timeout: float = 60.0) -> Iterator[Running]:
    """Start llama-server on a free port, wait (bounded) for its 'listening' line, stop it after."""
    cmd = [str(server), "-m", str(model), *BASE_ARGS, *extra]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=server_env(root), start_new_session=True
    )
    assert proc.stdout is not None
    log: list[str] = []
    deadline = time.monotonic() + timeout
    port = None
    try:
        for line in proc.stdout:  # ends at EOF when the process exits
            log.append(line.rstrip("\n"))
            m = LISTEN.search(line)
            if m:
                port = int(m.group(1))
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"llama-server not listening after {timeout} s:\n" + "\n".join(log[-20:]))
        if port is None:
            rc = proc.wait(timeout=10)
            raise ServerFailed(rc, log)
        import threading

        threading.Thread(target=lambda: log.extend(ln.rstrip("\n") for ln in proc.stdout), daemon=True).start()
        yield Running(f"http://127.0.0.1:{port}", proc, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
