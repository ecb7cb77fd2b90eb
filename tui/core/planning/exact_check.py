"""Does exact mode work with this llama-server? One real dry run on a generated tiny MTP model.

`mtp-tune doctor` shows the answer: a server that lacks `--log-jsonl` (older than the breakdown
lines), fails to load the model or never prints the MTP context's measurement cannot give exact
plans, and the user should know before trusting the "exact (llama.cpp)" label to appear.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.planning.cache import default_root
from tui.core.planning.exact import exact_plan

CHECK_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ExactCheck:
    ok: bool
    message: str  # one sentence
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "message": self.message, "seconds": round(self.seconds, 2)}


def check_exact_mode(server_bin: str | Path, root: Path | None = None, timeout_s: float = CHECK_TIMEOUT_S) -> ExactCheck:
    """Plan a tiny qwen35 MTP model exactly with `server_bin`; never raises."""
    from tui.core.demo.tiny_model import PRESETS, write_tiny_model

    root = Path(root) if root is not None else default_root()
    model = root / "selfcheck" / "tiny-mtp.gguf"
    try:
        if not model.is_file():
            model.parent.mkdir(parents=True, exist_ok=True)
            write_tiny_model(model, PRESETS["tiny-mtp"])
    except (OSError, ValueError) as e:
        return ExactCheck(False, f"could not write the check model ({e}).")
    settings = Settings(model=str(model), ctx_size=4096, parallel=1, spec_type=["draft-mtp"])
    res = exact_plan(settings, [], server_bin, timeout_s=timeout_s, use_cache=False, root=root)
    if not res.available:
        return ExactCheck(False, res.reason, res.seconds)
    if any("MTP context" in w for w in res.warnings):
        return ExactCheck(False, "this llama-server measures the target but not the MTP context; draft figures stay estimates.",
                          res.seconds)
    return ExactCheck(True, f"works: llama.cpp's --fit dry run measured the target and MTP contexts in {res.seconds:.2f} s.",
                      res.seconds)
