"""The tune's own options, read the same way by `mtp-tune tune` and the TUI's tune screen: the budget,
`--fixed NAME=V` and `--axis NAME=V1,V2` (the axes' names, the flags each sets, their values), the
KLD budget (`--max-kld`); the model it reads (`tune_model`); and the one builder of the TuneRequest
both run (`build_request`), with what quality must measure before the trials (`tune.kld`).

The model is a file on disk, or for `-hf`/`-mu` the header copy of the remote one: a tune of a model
that is not on the disk yet needs no download to start, since its space comes from the GGUF header
and every candidate is planned (llama.cpp's dry run) on the header copy that `plan -hf` reads by HTTP
ranges (cached, so a second tune asks nothing). The launches keep `-hf`/`-mu`: llama-server downloads
the file at the first launch and reuses its cache afterwards, as it would for the user."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.core.options.argv import settings_from_argv
from tui.core.options.settings import Settings
from tui.core.options.validate import value_errors
from tui.core.probes.concurrency import with_slots

if TYPE_CHECKING:  # the request's modules load the supervisor: imported when a tune is built, not for --help
    from tui.core.tune.kld import QualityAsk
    from tui.core.tune.space import Floors, Space
    from tui.core.tune.files import TuneModel
    from tui.core.tune.run import TuneRequest
    from tui.core.tune.workload import WorkloadSpec

#: --fixed / --axis names of the tune's own axes -> the llama-server flags each sets.
AXIS_FLAGS: dict[str, tuple[str, ...]] = {
    "draft-n-max": ("--spec-draft-n-max",), "ubatch": ("-ub",), "batch": ("-b",), "kv": ("-ctk", "-ctv"),
    "draft-kv": ("-ctkd", "-ctvd"), "flash-attn": ("-fa",), "n-cpu-moe": ("-ncmoe",), "threads": ("-t",),
}
_INT_AXES = frozenset({"draft-n-max", "ubatch", "batch", "n-cpu-moe", "threads"})


class UsageError(ValueError):
    """A tune option that cannot be used; the message names it."""


def parse_budget(text: str | None) -> float | None:
    """`30m`, `1h30m`, `90s`, `1.5h` or a bare number of minutes -> seconds (None: no budget)."""
    if text is None:
        return None
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)", t)
    if m:
        secs = float(m.group(1)) * 60.0
    else:
        m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", t)
        if not t or m is None:
            raise UsageError(f"--budget {text!r}: write a duration such as 30m, 1h30m, 90s or 45 (minutes).")
        h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        secs = h * 3600 + mi * 60 + s
    if secs <= 0:
        raise UsageError(f"--budget {text!r}: the budget must be more than zero.")
    return secs


def parse_max_kld(text: str | None) -> float | None:
    """`--max-kld 0.05`: the mean KL divergence a main K/V setting (and a model file) may cost (None: no budget)."""
    if text is None or not str(text).strip():
        return None
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise UsageError(f"--max-kld {text!r}: give a mean KL divergence above 0, e.g. 0.05 (llama-perplexity's "
                         "`Mean KLD`).")
    return x


def make_floors(kv_floor: str | None, draft_kv_floor: str | None, min_ctx: int, max_kld: float | None) -> Floors:
    """The floors from the CLI's flags or the TUI's fields, the one place their defaults are resolved:
    None or "" is the default floor; with a KLD budget the main KV types have no floor (measured
    instead), and a main floor given beside it is refused (SpaceError)."""
    # lazy, as this module's other core imports: `mtp-tune tune --help` loads none of the space's lab modules
    from tui.core.tune import DEFAULT_DRAFT_KV_FLOOR, DEFAULT_KV_FLOOR
    from tui.core.tune.space import Floors

    kv = kv_floor or (None if max_kld is not None else DEFAULT_KV_FLOOR)
    return Floors(kv, draft_kv_floor or DEFAULT_DRAFT_KV_FLOOR, min_ctx, max_kld)


def _split(text: str, opt: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not value.strip():
        raise UsageError(f"{opt} {text!r}: write NAME=VALUE{'S' if opt == '--axis' else ''}, e.g. "
                         f"{'ubatch=256,512' if opt == '--axis' else 'ubatch=512'}.")
    return name.strip().lstrip("-"), value.strip()


def fixed_tokens(items: list[str]) -> list[str]:
    """--fixed NAME=V as llama-server flags (checked later with every other flag, by the one validator)."""
    from tui.core.options import FALSEY, TRUTHY, find_option

    out: list[str] = []
    for text in items:
        name, value = _split(text, "--fixed")
        if name == "mtp":
            if value.lower() not in TRUTHY | FALSEY | {"none"}:
                raise UsageError(f"--fixed mtp={value}: write mtp=on or mtp=off.")
            out += ["--spec-type", "draft-mtp" if value.lower() in TRUTHY else "none"]
        elif name in AXIS_FLAGS:
            for flag in AXIS_FLAGS[name]:
                out += [flag, value]
        else:
            opt = find_option(f"--{name}") or find_option(f"-{name}")
            if opt is None:
                raise UsageError(f"--fixed {text}: {name!r} is neither an axis ({', '.join(['mtp', *AXIS_FLAGS])}) "
                                 "nor a llama-server option; or pass the flag itself after the model.")
            if not opt.takes_value:
                raise UsageError(f"--fixed {text}: {opt.canonical} is a switch; pass {opt.canonical} itself instead.")
            out += [opt.canonical, value]
    return out


def axis_values(items: list[str], floors: Any) -> dict[str, tuple[Any, ...]]:
    """--axis NAME=V1,V2 -> the values the space searches on that axis (floors still apply)."""
    from tui.core.options import CACHE_TYPES, FLASH_ATTN
    from tui.core.tune.space import KV_QUALITY, kv_pair, kv_quality

    out: dict[str, tuple[Any, ...]] = {}
    for text in items:
        name, rest = _split(text, "--axis")
        if name not in AXIS_FLAGS:
            raise UsageError(f"--axis {text}: unknown axis {name!r}; use one of {', '.join(AXIS_FLAGS)} "
                             "(MTP on/off is searched whenever the model has MTP layers; --fixed mtp=on pins it).")
        vals: list[Any] = []
        for v in (x.strip() for x in rest.split(",") if x.strip()):
            if name in _INT_AXES:
                if not re.fullmatch(r"\d+", v):
                    raise UsageError(f"--axis {name}: {v!r} is not a whole number.")
                vals.append(int(v))
            elif name in ("kv", "draft-kv"):
                bad = [t for t in v.split("/") if t not in CACHE_TYPES] if v.count("/") <= 1 else [v]
                if bad:
                    raise UsageError(f"--axis {name}: {bad[0]!r} is not a KV cache type; use one of {', '.join(CACHE_TYPES)}"
                                     ", or a pair K/V such as q8_0/q4_0.")
                k, vv = kv_pair(v)
                v = k if k == vv else v  # q8_0/q8_0 is q8_0
                floor = floors.kv if name == "kv" else floors.draft_kv
                if floor is not None and kv_quality(v) < KV_QUALITY[floor]:
                    raise UsageError(f"--axis {name}: {v} is below the floor {floor} "
                                     f"(--{'kv' if name == 'kv' else 'draft-kv'}-floor lowers it).")
                vals.append(v)
            else:
                if v not in FLASH_ATTN:
                    raise UsageError(f"--axis flash-attn: {v!r}; use one of {', '.join(FLASH_ATTN)}.")
                vals.append(v)
        if not vals or len(set(vals)) != len(vals):
            raise UsageError(f"--axis {text}: give each value once, at least one.")
        for v in vals:  # a value that fails alone (ubatch 0, threads 0, beyond 32 bits) never launches
            parts = kv_pair(v) if name in ("kv", "draft-kv") else (v, v)
            bad = value_errors(settings_from_argv([t for flag, part in zip(AXIS_FLAGS[name], parts)
                                                   for t in (flag, str(part))]).settings)
            if bad:
                raise UsageError(f"--axis {name}: {bad[0].message}")
        out[name] = tuple(vals)
    return out


def tune_model(base: Settings, *, where: str = "-m", progress: Callable[[str], None] | None = None) -> TuneModel:
    """The model `base` names, as llama-server reads the flags (-hf wins over -m; -mu downloads to -m).

    `where` names the field in errors ("-m" for the CLI, "the form's model field" for the TUI).
    Raises UsageError."""
    from tui.core.tune.files import TuneModel
    from tui.core.remote.errors import RemoteError
    from tui.core.remote.fetch import fetch_model
    from tui.core.remote.hub import sidecar_options
    from tui.core.remote.source import source_of

    source = source_of(base)
    if source is None:
        if not base.model:
            raise UsageError(f"tune needs a model: a file ({where} FILE.gguf), -hf REPO[:QUANT] or -mu URL.")
        path = Path(base.model).expanduser()
        if not path.is_file():
            raise UsageError(f"the model file {base.model} does not exist (or is not a file); check {where}.")
        return TuneModel(path)
    try:
        fetched = fetch_model(source, progress=progress, sidecar_opts=sidecar_options(base))
    except RemoteError as e:
        raise UsageError(str(e)) from None
    size_gib = fetched.size / 2**30
    notes = [f"{source.label} is planned from its header ({fetched.header_bytes / 2**20:.1f} MiB read by HTTP ranges"
             f"{', cached' if fetched.cached else ''}); llama-server downloads {fetched.name} ({size_gib:.2f} GiB) at the "
             "first launch unless its cache has it, and every later launch reuses that copy."]
    extra = [s for s in fetched.sidecars_for(base) if not s.is_draft]
    if extra:
        names = ", ".join(f"{s.path} ({s.role})" for s in extra)
        notes.append(f"-hf also downloads and loads {names} at every launch, which the plan does not count; "
                     "add --no-mmproj to tune without it.")
    return TuneModel(fetched.path, True, tuple(notes))


def quality_ask(base: Settings, spec: WorkloadSpec, model: TuneModel, *, max_kld: float | None,
                files: Sequence[Path] = (), ref: Path | None = None, where: str = "-m") -> QualityAsk | None:
    """What quality must measure before the trials (`tune.kld`): with a budget, several model files or
    a reference; None otherwise. The files must be on disk and quants of one model (UsageError)."""
    # lazy: quality's modules (the GGUF reader, llama-perplexity's runner) load when a tune is built, not for --help
    from tui.core.quality.models import ModelError
    from tui.core.quality.text import TextError, load_text
    from tui.core.tune.files import check_same_model, reference
    from tui.core.tune.kld import QualityAsk

    if max_kld is None and len(files) < 2 and ref is None:
        return None
    if model.remote:
        raise UsageError("--max-kld, --ref and several -m measure model files on disk with llama-perplexity; "
                         f"download the model first and give its file ({where}).")
    paths = tuple(files) or (Path(str(base.model)).expanduser(),)
    try:
        ref_path = reference(paths, str(ref) if ref else None) if ref or len(paths) > 1 else None
        check_same_model(paths, ref_path or paths[0])
        text = load_text(None, spec.text if spec.suite is not None else None)
    except (ModelError, TextError) as e:
        raise UsageError(str(e)) from None
    return QualityAsk(max_kld, paths, text, ref_path)


def build_request(base: Settings, spec: WorkloadSpec, floors: Floors, values: dict[str, tuple[Any, ...]], *,
                  server_bin: Path | None, gpus: str | None, budget_s: float | None, ab_passes: int,
                  ready_timeout: float, where: str, stand_ins: bool = False, devices: Any = None, fresh: bool = False,
                  progress: Callable[[str], None] | None = None, files: Sequence[Path] = (), ref: Path | None = None,
                  perplexity_bin: Path | None = None) -> tuple[TuneRequest, Space]:
    """The one TuneRequest builder of `mtp-tune tune` and the TUI's tune screen: the model `base` names
    (`tune_model`, `where` naming its field in errors), its header read once, the space checked for
    the workload's placeholder shape, the stand-ins' precondition, what quality measures first
    (`quality_ask`: the budget `floors.max_kld`, the model `files` as an axis, `ref`); every check
    before any launch.

    Returns the request and that space (a front end shows its size); raises UsageError (one sentence).
    `server_bin` None: the CLI finds the binary after these checks and sets it on the request."""
    from tui.core.planning.gguf_meta import GGUFError
    from tui.core.planning.gguf_reader import read_gguf
    from tui.core.tune.space import SpaceError, space_for_model
    from tui.core.tune.run import TuneRequest
    from tui.core.lab.launcher import stand_ins_problem
    from tui.core.tune.workload import placeholder

    if stand_ins and (why := stand_ins_problem(gpus, devices)):
        raise UsageError(why)
    if spec.concurrency > 1:  # every candidate serves N at once: -np N, each slot holding the longest request
        if base.parallel not in (None, 1, spec.concurrency):
            raise UsageError(f"-np {base.parallel} with --concurrency {spec.concurrency}: the tune launches "
                             f"-np {spec.concurrency}; drop -np.")
        base = with_slots(base, spec.concurrency)  # a -c given is one request's, as at -np 1
    if len(files) > 1:
        values = {**values, "model": tuple(str(f) for f in files)}
    try:
        model = tune_model(base, where=where, progress=progress)
        ask = quality_ask(base, spec, model, max_kld=floors.max_kld, files=files, ref=ref, where=where)
        meta = read_gguf(str(model.path))
        space = space_for_model(base, meta, placeholder(spec), floors=floors, values=values or None)
    except (GGUFError, SpaceError, OSError) as e:
        raise UsageError(str(e)) from None
    req = TuneRequest(base, spec, Path(server_bin or ""), floors, values, gpus, budget_s, ab_passes, fresh,
                      ready_timeout, model=model, stand_ins=stand_ins, meta=meta, quality=ask,
                      perplexity_bin=perplexity_bin)
    return req, space
