"""`scripts/gpu-check.sh {build,run,all} [--dry-run] [--out DIR] [--budget S]`: the steps, in order.

`build` compiles the CUDA binaries; `run` records doctor/gpus next to nvidia-smi, launches the
matrix, emulates the 6 GiB laptop and squeezes a first-decode OOM; `all` does both. Every step takes
its timeout from the budget clock and results are rewritten after each step, so a call killed at
its limit still leaves them in the output folder; rerunning continues the build where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from bench.gpu_check import adapter, assemble, build, nvsmi
from bench.gpu_check.backend import DryBackend, RealBackend, run_product
from bench.gpu_check.budget import BudgetClock
from bench.gpu_check.matrix import Config, generate

ROOT = Path(__file__).resolve().parents[2]
LAPTOP_MIB = 6144
#: rough seconds per step, for skipping what will not fit (shape launches read a ~20 GB sparse file)
ESTIMATE_S = {"tiny": 15.0, "tiny-moe": 15.0, "shape": 45.0, "sweep": 150.0, "probe": 60.0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu-check.sh", description=__doc__)
    p.add_argument("mode", choices=["build", "run", "all"], nargs="?", default="all")
    p.add_argument("--dry-run", action="store_true", help="no GPU: the whole logic on tests/data/gpu_check/ samples")
    p.add_argument("--out", type=Path, default=None, help="results folder (default: $OUT, else bench/out/gpu-check)")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "gpu-check", help="build and model folder")
    p.add_argument("--sdist", type=Path, default=None, help=f"the llama.cpp sdist (default: .whl/{build.sdist_name()})")
    p.add_argument("--budget", type=float, default=540.0, help="seconds this call may use (default 540 of a 600 s call)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--models", default="shape,tiny,tiny-moe", help="comma list of shape, tiny, tiny-moe (launch order)")
    p.add_argument("--long-tokens", type=int, default=16384, help="tokens of the long prompt (capped below ctx)")
    p.add_argument("--fresh", action="store_true", help="forget the state of an earlier call in --work")
    return p.parse_args(argv)


class Check:
    """One call's state: the clock, the backend, the result dict rewritten to `out` after each step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.clock = BudgetClock(args.budget)
        self.out: Path = args.out or Path(os.environ.get("OUT") or ROOT / "bench" / "out" / "gpu-check")
        self.work: Path = args.work
        self.work.mkdir(parents=True, exist_ok=True)
        self.bin_dir = self.work / "cuda-build" / "bin"
        self.backend = DryBackend(self.work) if args.dry_run else RealBackend(self.work, self.bin_dir)
        # $OUT is emptied before each device call; the work folder stays on a warm machine, so the
        # state kept there lets a second call continue (done configs are not launched again)
        self.state = self.work / "state.json"
        self.res: dict[str, Any] = json.loads(self.state.read_text()) if self.state.is_file() and not args.fresh else {}
        calls = self.res.setdefault("calls", [])
        calls.append({"mode": args.mode, "budget_s": args.budget, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        self.res.update({"dry_run": bool(args.dry_run), "mode": args.mode})
        self.res["skipped"] = self.clock.skipped  # this call's skips: a later call may still run them
        self.models: dict[str, str] = {}

    def save(self) -> None:
        self.res["elapsed_s"] = round(self.clock.elapsed, 1)
        assemble.write(self.res, self.out)
        self.state.write_text(json.dumps(self.res, default=str))

    def pack_logs(self) -> None:
        """The server logs as one archive in `out` (the device returns at most 8 files)."""
        logs = self.work / "logs"
        if logs.is_dir() and any(logs.iterdir()):
            with tarfile.open(self.out / "server-logs.tar.gz", "w:gz") as tf:
                tf.add(logs, arcname="logs")

    def log(self, msg: str) -> None:
        print(f"[gpu-check {self.clock.elapsed:6.1f} s] {msg}", flush=True)

    def product_json(self, args: list[str], timeout: float, label: str = "") -> dict[str, Any] | None:
        rc, out, err = self.backend.product(args, self.clock.timeout(timeout), label)
        try:
            return json.loads(out)
        except ValueError:
            self.log(f"`mtp-tune {' '.join(args[:2])}` gave no JSON (exit {rc}): {(err or out)[-300:]}")
            return None

    # -- steps ------------------------------------------------------------------------------
    def build(self) -> None:
        if (self.res.get("build") or {}).get("ok") and (self.bin_dir / "llama-server").is_file():
            self.log("build: done by an earlier call")
            return
        rows = nvsmi.parse_csv(self.backend.smi())
        arch = nvsmi.compute_cap(rows) or "native"
        sdist = self.args.sdist or ROOT / ".whl" / build.sdist_name()
        if self.args.dry_run:
            rec = build.plan(sdist, self.work, arch, self.args.jobs)
            rec.update(ok=None, dry=True, sdist_present=sdist.is_file())
        else:
            self.log(f"building {', '.join(build.TARGETS)} for sm_{arch} with {self.args.jobs} jobs")
            rec = build.build(sdist, self.work, arch, self.args.jobs, self.clock, self.out / "build.log")
        self.res["build"] = rec
        self.save()
        self.log(f"build: {'ok' if rec.get('ok') else rec.get('error', 'planned (dry run)')}")

    def records(self) -> None:
        smi_text = self.backend.smi()
        rows = nvsmi.parse_csv(smi_text)
        doctor = self.product_json(["doctor", "--json"], 60)
        gpus = self.product_json(["gpus", "--json"], 60)
        self.res["nvidia_smi"] = {"csv": smi_text, "rows": rows, "apps_csv": self.backend.smi("apps")}
        self.res["doctor"] = doctor
        self.res["gpus"] = gpus
        self.res["smi_compare"] = nvsmi.compare(rows, gpus or {})
        self.save()

    def make_models(self) -> None:
        mdir = self.work / "models"
        mdir.mkdir(parents=True, exist_ok=True)
        for name in self.args.models.split(","):
            path = mdir / f"{name}.gguf"
            if name == "shape":
                if not path.exists():
                    adapter.write_shape(path)
            elif not path.exists():
                arch = "qwen35moe" if name == "tiny-moe" else "qwen35"
                # generated on the CPU in both modes: the tiny models are the product's own, not a sample
                run_product(["demo-model", "--out", str(path), "--arch", arch, "--ctx", "131072"], self.backend.env,
                            self.clock.timeout(60))
            self.models[name] = str(path)

    def measure(self, cfg: Config) -> dict[str, Any]:
        sargs = cfg.server_args(self.models[cfg.model])
        plan = self.product_json(["plan", *sargs, "--json"], 60)
        rc, fit_out = self.backend.fit_print(cfg.fit_print_args(self.models[cfg.model]), self.clock.timeout(60))
        fit = assemble.parse_fit_print(fit_out) if rc == 0 else None
        # exact mode (a server start per call) for the bases only: the variations cost launches
        exact = self.backend.exact(sargs, self.clock.timeout(90)) if cfg.priority == 0 else None
        long_tokens = min(self.args.long_tokens, cfg.ctx - 512)
        launch = self.backend.launch(cfg, sargs, self.clock.timeout(ESTIMATE_S[cfg.model] * 3), long_tokens)
        bufs = adapter.buffers(launch.log_text) if launch.log_text else None
        row = assemble.config_row(cfg.to_json(), launch.__dict__ | {"log_text": None}, bufs, plan, fit)
        if exact is not None:
            row["exact_status"] = exact.get("status"), exact.get("reason")
            row["exact_gpu"] = assemble.planned_gpu(exact.get("plan"))
        if not launch.ready or (launch.error and not launch.server_alive):  # a slow request is no failure
            row["classified"] = adapter.classify_log(launch.exit_code, launch.log_text, sargs, was_ready=launch.ready)
        row["log_tail"] = launch.log_text.splitlines()[-5:] if launch.log_text else []
        self._keep_log(cfg.id, launch.log_text)
        return row

    def _keep_log(self, name: str, text: str) -> None:
        if text:
            d = self.work / "logs"
            d.mkdir(exist_ok=True)
            (d / f"{name}.log").write_text(text)

    def matrix(self, configs: list[Config]) -> None:
        rows = self.res.setdefault("matrix", [])
        done = {r["config"]["id"] for r in rows}
        for cfg in configs:
            if cfg.id in done or cfg.model not in self.models:
                continue
            if self.clock.skip(f"matrix {cfg.id}", ESTIMATE_S[cfg.model]):
                continue
            self.log(f"launch {cfg.id}")
            rows.append(self.measure(cfg))
            self.save()

    def laptop(self) -> None:
        """All but 6 GiB held by a helper: gpus shows it, the sweep searches --fit-target, a probe OOMs."""
        if (self.res.get("laptop") or {}).get("done"):
            return
        if "shape" not in self.models or self.clock.skip("laptop emulation", ESTIMATE_S["sweep"]):
            return
        shape = self.models["shape"]
        threads = ["-t", str(self.args.jobs), "-tb", str(self.args.jobs)]  # fit moves experts to the CPU
        fit_args = [*Config("shape").server_args(shape, fit=True), *threads]
        sweep_args = [a for i, a in enumerate(fit_args) if a != "-ub" and (i == 0 or fit_args[i - 1] != "-ub")]
        lap: dict[str, Any] = self.res.setdefault("laptop", {})
        lap["leave_mib"] = LAPTOP_MIB
        with self.backend.hold(LAPTOP_MIB) as holder:
            lap["holder"] = holder
            if holder.get("error"):
                self.log(holder["error"])
                return
            gpus = self.product_json(["gpus", "--json"], 30, "gpus-laptop")
            lap["gpus"] = gpus
            lap["nvidia_smi"] = self.backend.smi()
            lap["nvidia_smi_apps"] = self.backend.smi("apps")
            procs = [p for d in (gpus or {}).get("devices", []) for p in d.get("processes", [])]
            lap["foreign_seen"] = any(not p.get("ours") and (p.get("used_memory_mib") or 0) >= 0.9 * (holder.get("held_mib") or 1)
                                      for p in procs)
            lap["plan"] = self.product_json(["plan", *fit_args, "--json"], 60)
            lap["exact"] = self.backend.exact(fit_args, self.clock.timeout(90))  # fit's own choice on 6 GiB
            if not self.clock.skip("laptop sweep", ESTIMATE_S["sweep"]):
                self.log("sweep: fit-target search on the 6 GiB card")
                minutes = max(1.0, (self.clock.left - ESTIMATE_S["probe"]) / 60)
                sweep = self.product_json(["sweep", *sweep_args, "--fit-target", "0", "--axis", "ub=512", "--suite", self.suite(),
                                           "--try-anyway", "--repeat", "1", "--n-predict", "16", "--budget", f"{minutes:.1f}",
                                           "--ready-timeout", "120", "--json"], minutes * 60 + 30, "sweep-laptop")
                lap["sweep"] = sweep
                finds = (sweep or {}).get("findings") or []
                lap["sweep_finding"] = finds[0] if finds else None
            self.save()
            if not self.clock.skip("laptop probe", ESTIMATE_S["probe"]):
                big_ub = Config("shape", ub=2048).server_args(shape, fit=True)
                lap["probe_laptop"] = self.probe([*big_ub, *threads, "--fit-target", "0"], "probe-laptop")
                lap["done"] = True
        self.save()

    def probe(self, sargs: list[str], label: str) -> dict[str, Any]:
        self.log(f"{label}: probe {' '.join(sargs[2:])}")
        pj = self.product_json(["probe", *sargs, "--suite", self.suite(), "--repeat", "1", "--n-predict", "16", "--no-warmup",
                                "--ready-timeout", "120", "--json"], 180, label) or {}
        log_path = ((pj.get("server") or {}).get("log_path")) or self.backend.newest_log()
        text = self.backend.read_log(log_path) if log_path else ""
        self._keep_log(label, text)
        rec = {"status": pj.get("status"), "error": pj.get("error"), "log_path": log_path, "args": sargs,
               "buffers": adapter.buffers(text)["totals"] if text else None}
        if pj.get("status") != "ok" and text:
            ready = "listening on" in text
            rec["classified"] = adapter.classify_log(-6 if ready else 1, text, sargs, was_ready=ready)
            rec["at_first_decode"] = ready
        return rec

    def suite(self) -> str:
        """A one-prompt probe suite: the searches need a first decode, not statistics."""
        path = self.work / "one-prompt.jsonl"
        path.write_text(json.dumps({"name": "one", "prompt": "Write one sentence about GPUs."}) + "\n")
        return str(path)

    def squeeze(self) -> None:
        """Leave the card just the load's growth plus half the first decode's: the decode must OOM."""
        rows = [r for r in self.res.get("matrix", []) if r.get("ready") and (r["nvml_delta"].get("after_decode") or 0)
                - (r["nvml_delta"].get("after_load") or 0) > 16]
        if "probe_squeeze" in (self.res.get("laptop") or {}):
            return
        if not rows or self.clock.skip("first-decode squeeze", ESTIMATE_S["probe"]):
            return
        r = max(rows, key=lambda r: (r["config"]["model"] == "shape", r["nvml_delta"]["after_decode"] - r["nvml_delta"]["after_load"]))
        load, dec = r["nvml_delta"]["after_load"], r["nvml_delta"]["after_decode"]
        leave = load + (dec - load) / 2
        cfg = Config(**{k: v for k, v in r["config"].items() if k != "id"})
        with self.backend.hold(leave) as holder:
            rec = self.probe(cfg.server_args(self.models[cfg.model]), "probe-squeeze")
        rec.update(holder=holder, config=cfg.id, leave_mib=leave)
        self.res.setdefault("laptop", {})["probe_squeeze"] = rec
        self.save()

    def run(self) -> None:
        if not self.args.dry_run and not (self.bin_dir / "llama-server").is_file():
            self.res["error"] = f"no CUDA build in {self.bin_dir}: run `scripts/gpu-check.sh build` first"
            self.save()
            return
        self.records()
        self.make_models()
        configs = generate(tuple(m for m in self.args.models.split(",") if m))
        self.matrix([c for c in configs if c.priority == 0])
        self.laptop()
        self.matrix([c for c in configs if c.priority > 0])
        self.squeeze()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check = Check(args)
    try:
        if args.mode in ("build", "all"):
            check.build()
        if args.mode in ("run", "all") and (args.mode == "run" or check.res["build"].get("ok") or args.dry_run):
            check.run()
    finally:
        check.res["calls"][-1]["elapsed_s"] = round(check.clock.elapsed, 1)
        check.save()
        check.pack_logs()
        print("\n".join(assemble.summary_lines(check.res)), flush=True)
        print(f"results: {check.out / 'gpu-check.json'} and gpu-check.md", flush=True)
    return 0 if not check.res.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
