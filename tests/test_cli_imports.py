"""The CLI imports only what a command uses (start-up time: bench/bench_plan_startup.py measures it).

Each check runs the entry point in a fresh interpreter and reads back the modules it imported: the
estimate plan attaches a cached calibration through `planning.cache` alone (not `calibrate`, whose dry
runs need the server supervisor, readiness and httpx); `--help`, `plan --help` and `--version` import no
command beyond the one asked for and nothing heavy. No timing here: only what was imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tui.cli import _commands, _listing
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.planning import calibration as cal
from tui.core.planning.cache import calibration_path, default_root, save_calibration
from tui.core.planning.gguf_reader import read_gguf

#: runs `tui.cli.main(argv)` as the console script does, then writes its exit code and sys.modules
PROBE = """
import json, sys
from tui.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""
HEAVY = ("tui.core.server.supervisor", "tui.core.server.readiness", "httpx", "textual", "huggingface_hub")
TIMEOUT_S = 120


def run_cli(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[dict[str, object], str]:
    """(the probe's record, stdout) of `mtp-tune ARGV` in a fresh interpreter."""
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    assert out.is_file(), done.stderr
    return json.loads(out.read_text()), done.stdout


def a_calibration(digest: str, server_bin: Path) -> cal.Calibration:
    """A stored calibration as calibrate() would leave it (its terms do not matter here, only that it is found)."""
    fit = cal.GraphFit(True, (1.0, 2.0), 3.0, 1.0, None, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), 9, 0.01)
    return cal.Calibration("CPU", digest, [str(server_bin), 1, 2], {"target": fit}, 1.0, 17, [], {})


def test_the_estimate_plan_reads_a_cached_calibration_without_the_server_supervisor(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "tiny-mtp.gguf", PRESETS["tiny-mtp"])
    server = tmp_path / "llama-server"  # found, never run: the calibration cache is keyed by it
    server.write_text("#!/bin/sh\nexit 1\n")
    server.chmod(0o755)
    meta = read_gguf(model)
    save_calibration(calibration_path(default_root(), meta, server), a_calibration("d", server))

    got, stdout = run_cli(tmp_path, "plan", "-m", str(model), "-c", "4096", "--gpus", "24GiB",
                          env={"MTP_TUNE_LLAMA_SERVER": str(server)})
    modules = set(got["modules"])  # type: ignore[arg-type]
    assert got["code"] == 0, stdout
    assert "calibrated on this model by llama.cpp (17 dry runs, cached" in stdout  # the cache was read
    assert "tui.core.planning.cache" in modules
    assert not modules & {*HEAVY, "tui.core.planning.calibrate", "tui.core.planning.dryrun",
                          "tui.core.planning.exact"}, sorted(modules & {*HEAVY, "tui.core.planning.calibrate"})


def test_help_and_version_import_no_command_and_nothing_heavy(tmp_path: Path) -> None:
    commands = {m.COMMAND for m in _commands().values()}
    for argv in (["--help"], ["--version"], ["plan", "--help"]):
        got, stdout = run_cli(tmp_path, *argv)
        modules = set(got["modules"])  # type: ignore[arg-type]
        assert got["code"] == 0 and stdout, argv
        assert not modules & {*HEAVY, "numpy", "gguf"}, (argv, sorted(modules & {*HEAVY, "numpy", "gguf"}))
        imported = {m.rsplit(".", 1)[1].replace("_", "-") for m in modules if m.startswith("tui.cli.")}
        assert imported & commands == ({"plan"} if "plan" in argv else set()), (argv, imported)
    top, stdout = run_cli(tmp_path, "--help")
    for name in commands:  # every command listed, though none was imported
        assert f"    {name}" in stdout


def test_the_listing_read_from_the_sources_is_what_the_modules_declare() -> None:
    assert _listing() == {m.COMMAND: m.HELP for m in _commands().values()}


def test_the_detecting_plan_skips_what_only_other_commands_need(tmp_path: Path) -> None:
    """Detecting GPUs reads nvidia-ml-py's version from its dist-info folder (not importlib.metadata),
    and the server is found without the build's tarfile: 40 ms of every `mtp-tune plan` before."""
    model = write_tiny_model(tmp_path / "tiny-mtp.gguf", PRESETS["tiny-mtp"])
    got, stdout = run_cli(tmp_path, "plan", "-m", str(model), "-c", "4096")
    modules = set(got["modules"])  # type: ignore[arg-type]
    assert got["code"] == 0, stdout
    assert "tui.core.planning.devices" in modules  # the devices were detected
    assert not modules & {"importlib.metadata", "tarfile"}, sorted(modules & {"importlib.metadata", "tarfile"})


def test_the_bindings_version_is_the_dist_info_folders(tmp_path: Path) -> None:
    from tui.core.gpu.nvml_codes import bindings_version
    from tui.core.gpu.types import NA

    module = type(sys)("pynvml")
    module.__file__ = str(tmp_path / "pynvml.py")
    assert bindings_version(module) is NA  # no dist-info beside it
    (tmp_path / "nvidia_ml_py-13.615.71.dist-info").mkdir()
    assert bindings_version(module) == "13.615.71"


def test_the_app_module_loads_no_experiment_engine(tmp_path: Path) -> None:
    """The TUI's first frame waits for `tui.ui.app`'s imports: the lab's engine (the supervisor, httpx)
    loads with the first launch or experiment, never with the screen."""
    out = tmp_path / "modules.json"
    code = f"import json, sys\nimport tui.ui.app\njson.dump(sorted(sys.modules), open({str(out)!r}, 'w'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert out.is_file(), done.stderr
    modules = set(json.loads(out.read_text()))
    heavy = {m for m in modules if m in ("tui.core.server.supervisor", "httpx") or m.startswith("tui.core.lab")}
    assert not heavy, sorted(heavy)
