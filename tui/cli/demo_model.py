"""Write a tiny, deterministic Qwen3.5-style GGUF with an MTP head (for demos, tests and benchmarks)."""

from __future__ import annotations

import argparse

from tui.cli._common import fail
from tui.core.demo.tiny_model import PRESETS, TinySpec, write_tiny_model

COMMAND = "demo-model"
HELP = "generate a tiny MTP GGUF (qwen35 / qwen35moe) with a chosen draft acceptance"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output .gguf path")
    p.add_argument("--arch", choices=["qwen35", "qwen35moe"], default="qwen35")
    p.add_argument("--no-mtp", action="store_true", help="write no MTP/NextN block")
    p.add_argument("--mtp-agree", type=float, default=1.0,
                   help="fraction of tokens where the MTP head agrees with the model: 1 = every draft accepted")
    p.add_argument("--random", action="store_true", help="random weights (acceptance ~0)")
    p.add_argument("--dtype", choices=["f16", "q8_0", "f32"], default="f16")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named preset (overrides the options above)")
    p.add_argument("--ctx", type=int, default=4096, help="context_length written to the model")


def run(args: argparse.Namespace) -> int:
    if args.preset:
        spec = PRESETS[args.preset]
    else:
        spec = TinySpec(
            arch=args.arch, mtp=not args.no_mtp, mtp_agree=args.mtp_agree,
            mode="random" if args.random else "bigram", dtype=args.dtype, ctx=args.ctx,
        )
    try:
        path = write_tiny_model(args.out, spec)
    except (ValueError, OSError) as exc:
        return fail(f"demo-model: {exc}")
    print(f"{path}  ({path.stat().st_size:,} bytes, arch {spec.arch}, mtp {'yes' if spec.mtp else 'no'}, "
          f"agree {spec.mtp_agree}, {spec.mode}, {spec.dtype})")
    return 0
