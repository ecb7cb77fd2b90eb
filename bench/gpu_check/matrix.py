"""The configurations the check launches: a base and one change at a time, per model.

The issue's matrix (ctx 65536/100000, ub 512/2048, KV f16/q8_0/q4_0 with FA on and one FA off, MTP
off/n-max 2/3, draft KV f16/q4_0) as a full product would be ~100 launches per model; one factor at
a time around a base covers every value in 9 launches, plus one corner with every large/small choice
at once. Bases come first, so a short budget still measures every model once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

MODELS: tuple[str, ...] = ("shape", "tiny", "tiny-moe")  # the real dimensions first


@dataclass(frozen=True)
class Config:
    model: str
    ctx: int = 65536
    ub: int = 512
    kv: str = "f16"
    fa: str = "on"
    mtp_n: int = 3  # 0 = MTP off
    draft_kv: str = "f16"
    priority: int = 1
    note: str = ""

    @property
    def id(self) -> str:
        mtp = f"mtp{self.mtp_n}-d{self.draft_kv}" if self.mtp_n else "nomtp"
        return f"{self.model}-c{self.ctx}-ub{self.ub}-{self.kv}-fa{self.fa}-{mtp}"

    def server_args(self, model_path: str, fit: bool = False) -> list[str]:
        """llama-server flags: everything on the GPU with fit off, so the buffers are the config's own.

        `fit=True` leaves -c and -ngl unset and turns fit on: fit only adjusts what the user did not
        set (common/fit.cpp:464), which the 6 GiB laptop runs need.
        """
        args = ["-m", model_path, "-b", str(max(2048, self.ub)), "-ub", str(self.ub),
                "-ctk", self.kv, "-ctv", self.kv, "-fa", self.fa, "-np", "1"]
        args += ["--fit", "on"] if fit else ["-c", str(self.ctx), "-ngl", "999", "--fit", "off"]
        if self.mtp_n:
            args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(self.mtp_n),
                     "-ctkd", self.draft_kv, "-ctvd", self.draft_kv]
        return args

    def fit_print_args(self, model_path: str) -> list[str]:
        """The same config for `llama-fit-params --fit-print on`: it takes only the common options
        (no -np, --fit, --spec-*, -ctkd: server-only in common/arg.cpp), so its estimate has no draft."""
        return ["-m", model_path, "-c", str(self.ctx), "-b", str(max(2048, self.ub)), "-ub", str(self.ub),
                "-ctk", self.kv, "-ctv", self.kv, "-fa", self.fa, "-ngl", "999"]

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), id=self.id)


def variations(base: Config) -> list[Config]:
    """Each matrix value not in the base, changed alone (FA off keeps KV f16: quantized V needs FA)."""
    out = [
        replace(base, ctx=100000, note="ctx 100000"),
        replace(base, ub=2048, note="ub 2048"),
        replace(base, kv="q8_0", note="KV q8_0"),
        replace(base, kv="q4_0", note="KV q4_0"),
        replace(base, fa="off", note="FA off"),
        replace(base, mtp_n=0, note="MTP off"),
        replace(base, mtp_n=2, note="n-max 2"),
        replace(base, draft_kv="q4_0", note="draft KV q4_0"),
    ]
    return [replace(c, priority=1) for c in out]


def generate(models: tuple[str, ...] = MODELS, corner: bool = True) -> list[Config]:
    """Bases of every model first (priority 0), then the variations, then the corners."""
    bases = [Config(m, priority=0, note="base") for m in models]
    rows = list(bases)
    for b in bases:
        rows += variations(b)
    if corner:
        rows += [Config(m, ctx=100000, ub=2048, kv="q4_0", draft_kv="q4_0", priority=2, note="corner")
                 for m in models]
    seen: set[str] = set()
    unique = [c for c in rows if not (c.id in seen or seen.add(c.id))]
    return sorted(unique, key=lambda c: c.priority)  # stable: model order kept within a priority
