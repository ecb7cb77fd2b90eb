"""Where the check's measurements come from: the real card (`RealBackend`) or recorded samples
(`DryBackend`, tests/data/gpu_check/). Both answer the same questions, so the rest of the check is
one code path, run in CI by the dry mode.

Launches go through the product: `mtp-tune serve` (its supervisor, its `-lv 4` log file), `plan`,
`probe`, `sweep`, `gpus`, `doctor`, run as `python -m tui.cli` with this interpreter.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.gpu_check import nvsmi
from bench.gpu_check.matrix import Config

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "gpu_check"
READING_POINTS: tuple[str, ...] = ("baseline", "after_load", "after_decode", "after_long")


@dataclass
class Launch:
    """One server launch: NVML readings (MiB used on GPU 0), its log, and how it ended."""

    ready: bool = False
    readings: dict[str, float | None] = field(default_factory=dict)
    log_text: str = ""
    exit_code: int | None = None
    error: str | None = None
    seconds: float = 0.0
    long_prompt_tokens: int = 0
    server_alive: bool | None = None  # after a failed request: did /health still answer (a timeout, not a death)?


def product_env(work: Path, server_bin: Path | None) -> dict[str, str]:
    """mtp-tune's environment: its dirs under the work folder (nothing of the user's touched)."""
    env = dict(os.environ)
    for var, sub in (("MTP_TUNE_CACHE_DIR", "cache"), ("MTP_TUNE_CONFIG_DIR", "config"), ("MTP_TUNE_DATA_DIR", "data")):
        env[var] = str(work / "mtp-tune" / sub)
    if server_bin is not None:
        env["MTP_TUNE_LLAMA_SERVER"] = str(server_bin)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_product(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """`mtp-tune ARGS` with a timeout; (exit code, stdout, stderr), 124 on timeout."""
    try:
        p = subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, env=env,
                           timeout=timeout, start_new_session=False)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, f"timed out after {timeout:.0f} s"


class RealBackend:
    """The real card: nvidia-smi, the CUDA build, `mtp-tune serve` launches, a torch/cupy VRAM holder."""

    dry = False

    def __init__(self, work: Path, bin_dir: Path) -> None:
        self.work = work
        self.bin_dir = bin_dir
        self.env = product_env(work, bin_dir / "llama-server")

    # -- nvidia-smi / product CLI ---------------------------------------------------------
    def smi(self, which: str = "gpu") -> str:
        argv = nvsmi.query_argv() if which == "gpu" else nvsmi.apps_argv()
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def used_mib(self) -> float | None:
        try:
            return nvsmi.used_mib(nvsmi.parse_csv(self.smi()))
        except ValueError:
            return None

    def product(self, args: list[str], timeout: float, label: str = "") -> tuple[int, str, str]:
        return run_product(args, self.env, timeout)

    def newest_log(self) -> str:
        """The latest launch log mtp-tune wrote (when a command died before printing its JSON)."""
        logs = sorted((self.work / "mtp-tune" / "data" / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        return str(logs[-1]) if logs else ""

    def read_log(self, path: str) -> str:
        p = Path(path)
        return p.read_text(errors="replace") if p.is_file() else ""

    def fit_print(self, server_args: list[str], timeout: float) -> tuple[int, str]:
        """llama-fit-params --fit-print on: llama.cpp's own dry run of the same flags (CUDA build)."""
        argv = [str(self.bin_dir / "llama-fit-params"), *server_args, "--fit-print", "on"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
            return p.returncode, p.stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 124, str(exc)

    def exact(self, server_args: list[str], timeout: float) -> dict[str, Any]:
        from bench.gpu_check import adapter

        return adapter.exact(server_args, self.bin_dir / "llama-server", timeout, self.work / "exact")

    # -- launches -------------------------------------------------------------------------
    def launch(self, cfg: Config, server_args: list[str], timeout: float, long_tokens: int) -> Launch:
        """`mtp-tune serve` the config; read NVML after load, after a first decode, after a long prompt."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        res = Launch(readings={"baseline": self.used_mib()})
        argv = [sys.executable, "-m", "tui.cli", "serve", "--ready-timeout", str(max(5, int(timeout - 10))),
                "--stop-grace", "5", *server_args]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        url = log_path = None
        out: list[str] = []
        try:
            while url is None and time.monotonic() < deadline:
                try:
                    ln = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if ln is None:
                    break
                out.append(ln)
                if ln.startswith("log: "):
                    log_path = Path(ln[5:].strip())
                m = re.search(r"ready at (http://\S+) after", ln)
                if m:
                    url = m.group(1)
            if url is None:
                res.error = "not ready: " + " | ".join(out[-3:])[-400:]
            else:
                res.ready = True
                res.readings["after_load"] = self.used_mib()
                left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
                err = _complete(url, {"prompt": "The capital of France is", "n_predict": 16}, left())
                res.readings["after_decode"] = self.used_mib()
                if err:
                    res.error = f"first decode: {err}"
                elif long_tokens:
                    ids = _token_ids(url, left())
                    prompt = [ids[i % len(ids)] for i in range(long_tokens)] if ids else None
                    err = _complete(url, {"prompt": prompt, "n_predict": 4, "cache_prompt": False}, left()) if prompt else "no tokens"
                    res.readings["after_long"] = self.used_mib()
                    res.long_prompt_tokens = long_tokens
                    if err:
                        res.error = f"long prompt: {err}"
            if url is not None and res.error:
                res.server_alive = _healthy(url)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # serve stops its server and exits
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            res.exit_code = proc.returncode
        res.seconds = round(time.monotonic() - t0, 2)
        if log_path is not None and log_path.is_file():
            res.log_text = log_path.read_text(errors="replace")
        return res

    @contextmanager
    def hold(self, leave_mib: float, timeout: float = 60) -> Iterator[dict[str, Any]]:
        """A helper process holding all but `leave_mib` of GPU 0 (torch, else cupy); always killed."""
        code = HOLDER_CODE
        proc = subprocess.Popen([sys.executable, "-c", code, str(int(leave_mib))], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        info: dict[str, Any] = {"pid": proc.pid, "leave_mib": leave_mib, "held_mib": None, "error": None}
        try:
            lines: queue.Queue[str | None] = queue.Queue()
            threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
            try:
                ln = lines.get(timeout=timeout)
            except queue.Empty:
                ln = None
            m = re.match(r"HELD (\d+)", ln or "")
            if m:
                info["held_mib"] = int(m.group(1))
            else:
                info["error"] = f"the VRAM holder did not start: {ln!r}"
            yield info
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=20)
            info["exit_code"] = proc.returncode


#: The holder: allocate (free - leave) MiB with torch (cupy as fallback), print HELD, wait for stdin EOF.
HOLDER_CODE = r"""
import sys
leave = int(sys.argv[1]) * 2**20
try:
    import torch
    free, total = torch.cuda.mem_get_info(0)
    n = max(0, free - leave)  # the holder's own CUDA context is already counted in `free`
    buf = torch.empty(n, dtype=torch.uint8, device="cuda:0")
except Exception:
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    n = max(0, free - leave)
    buf = cupy.empty(n, dtype=cupy.uint8)
print("HELD", n // 2**20, flush=True)
sys.stdin.read()
"""


def _pump(proc: subprocess.Popen, q: queue.Queue) -> None:
    assert proc.stdout is not None
    for ln in proc.stdout:
        q.put(ln.rstrip("\n"))
    q.put(None)


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 only
        return json.loads(r.read())


def _complete(url: str, body: dict[str, Any], timeout: float) -> str | None:
    try:
        _post(url + "/completion", dict(body, temperature=0), timeout)
        return None
    except Exception as exc:  # noqa: BLE001 - a dead server is the measurement here
        return f"{type(exc).__name__}: {exc}"[:300]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:  # noqa: S310 - 127.0.0.1 only
            return r.status == 200
    except Exception:  # noqa: BLE001 - refused or reset: the server is gone
        return False


def _token_ids(url: str, timeout: float) -> list[int]:
    try:
        return list(_post(url + "/tokenize", {"content": "the quick brown fox jumps over the lazy dog " * 4}, timeout)["tokens"])
    except Exception:  # noqa: BLE001
        return []


class DryBackend:
    """Recorded samples instead of a card: the same answers, read from tests/data/gpu_check/.

    `plan` is the one product command that still runs for real (on the CPU, against the recorded
    card's size), so the planner's numbers in a dry report are the planner's.
    """

    dry = True

    def __init__(self, work: Path, data: Path = DATA) -> None:
        self.work = work
        self.data = data
        self.env = product_env(work, None)
        self.readings = json.loads((data / "nvml_readings.json").read_text())
        self.laptop = False
        self.helpers_started = 0

    def _smi_file(self, which: str) -> Path:
        stem = "nvidia-smi" if which == "gpu" else "nvidia-smi-apps"
        return self.data / (f"{stem}-laptop.csv" if self.laptop else f"{stem}.csv")

    def smi(self, which: str = "gpu") -> str:
        return self._smi_file(which).read_text()

    def used_mib(self) -> float | None:
        return nvsmi.used_mib(nvsmi.parse_csv(self.smi()))

    def product(self, args: list[str], timeout: float, label: str = "") -> tuple[int, str, str]:
        if args[0] == "plan":
            row = nvsmi.parse_csv(self.smi())[0]  # the held card plans as a card of its free memory
            gpus = f"{int(row['memory.free'] if self.laptop else row['memory.total'])}MiB"
            return run_product([*args, "--gpus", gpus], self.env, timeout)
        return 0, (self.data / f"{label or args[0]}.json").read_text(), ""

    def newest_log(self) -> str:
        return ""

    def read_log(self, path: str) -> str:
        return (self.data / Path(path).name).read_text()

    def fit_print(self, server_args: list[str], timeout: float) -> tuple[int, str]:
        model = server_args[server_args.index("-m") + 1]
        name = "fit-print-shape.txt" if "shape" in Path(model).name else "fit-print-tiny.txt"
        return 0, (self.data / name).read_text()

    def exact(self, server_args: list[str], timeout: float) -> dict[str, Any]:
        model = server_args[server_args.index("-m") + 1]
        name = "exact-shape.json" if "shape" in Path(model).name else "exact-tiny.json"
        return json.loads((self.data / name).read_text())

    def launch(self, cfg: Config, server_args: list[str], timeout: float, long_tokens: int) -> Launch:
        key = "laptop-oom" if self.laptop else cfg.model
        rec = self.readings[key]
        log = (self.data / rec["log"]).read_text()
        return Launch(ready=rec["ready"], readings={k: rec.get(k) for k in READING_POINTS}, log_text=log,
                      exit_code=rec.get("exit_code", 0), error=rec.get("error"), seconds=0.0,
                      long_prompt_tokens=long_tokens if rec.get("after_long") is not None else 0,
                      server_alive=rec.get("server_alive"))

    @contextmanager
    def hold(self, leave_mib: float, timeout: float = 60) -> Iterator[dict[str, Any]]:
        self.laptop = True
        self.helpers_started += 1
        total = nvsmi.parse_csv(self.smi())[0]
        info: dict[str, Any] = {"pid": None, "leave_mib": leave_mib, "held_mib": int(total["memory.used"]), "error": None}
        try:
            yield info
        finally:
            self.laptop = False
            info["exit_code"] = -9
