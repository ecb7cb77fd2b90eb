"""Demo mode: a generated tiny MTP model, a provisioned CPU llama-server and a simulated GPU profile,
so the whole tuning loop works on a machine with no GPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui.core.server import provision
from tui.core.gpu.profiles import PROFILES, HwProfile
from tui.core.config.paths import cache_dir

DEFAULT_PROFILE = "rtx3060-laptop-6g"
DEMO_MODEL = "small-mtp-q8_0"  # 25 MB: big enough for visible speeds, generated in about a second


@dataclass(frozen=True)
class DemoSetup:
    server: Path
    model: Path
    hardware: HwProfile


def demo_model_path(name: str = DEMO_MODEL) -> Path:
    """The generated demo model, written on first use and reused (generation is deterministic)."""
    path = cache_dir() / "models" / f"{name}.gguf"
    if not path.is_file():
        from tui.core.demo.tiny_model import PRESETS, write_tiny_model  # numpy and gguf: only when needed

        write_tiny_model(path, PRESETS[name])
    return path


def prepare_demo(
    profile: str = DEFAULT_PROFILE,
    server_bin: str | None = None,
    progress: provision.ProgressFn | None = None,
    model: str = DEMO_MODEL,
) -> DemoSetup:
    """Find or build the server, generate the model; raises ProvisionError / KeyError with a message."""
    if profile not in PROFILES:
        raise KeyError(f"unknown GPU profile {profile!r}; known: {', '.join(PROFILES)}")
    found = provision.ensure_server(server_bin, progress=progress)
    return DemoSetup(found.path, demo_model_path(model), PROFILES[profile])
