"""The calibrated estimate: a model's compute buffers set by llama.cpp's own measurements of that model.

The structural estimate (graph.py, compute.py) derives compute buffers from shapes and constants fitted
on other models, so on a given model it can miss by tens of percent. llama.cpp itself measures any
configuration in about a second (exact mode's dry run), so once a model has been measured at a few
designed settings (`DESIGN`, run by planning.calibrate) its compute terms are *that model's*, and every
later plan, for any settings, is near-exact at the estimate's speed.

The form is the graph allocator's: a buffer is the peak of a few live sets, each linear in what the
settings change, and the largest wins:

    graph buffer = [mask] + max(ffn, attention, floor, output)
      ffn       = c0 + p * T                      (the FFN block; the draft's keeps no mask)
      attention = s * mask + KQ + q * T           (KQ: the f32 scores without flash attention, exact;
                                                   s: the mask's live share, from two long contexts)
      floor     = a + b*n + g*T + (k + c*chunks)*logits + h*n*T (recurrent state copies, the tg graph, MTP's outputs)
      output    = logits                          (n_outputs x n_vocab floats: a lower bound)

with T the ubatch, n_seq the slots and the KQ mask and logits computed exactly. Each term is fitted on
the design points where it is the peak; a term no design point puts at the peak keeps its structural
lower bound (the exact mask/KQ/logits alone) and is reported as unconstrained. Three graphs are fitted
apart: the target without MTP, the target with MTP (which outputs more rows and keeps the hidden
states), and the MTP draft. A calibration is per model (header hash), per llama-server binary and per
device kind (the backend that measured it: a CPU build's figures hold for the host and for CPU-backed
RPC stand-ins, not for a CUDA device).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tui.core.planning import graph
from tui.core.planning.gguf_meta import HParams
from tui.core.planning.resolve import Resolved

FORMAT = 4
GRAPHS = ("target", "target_mtp", "draft")
#: a design point belongs to a term when it lies above the other terms by more than this (bytes, relative)
_TOL_ABS, _TOL_REL = 64 * 1024, 0.003


@dataclass(frozen=True)
class DesignPoint:
    """One calibration dry run: settings on top of the model (host only, fit off) and what it identifies."""

    name: str
    args: tuple[str, ...]
    mtp: bool
    term: str  # ffn | attention | floor | output | split
    devices: int = 0  # split points: the number of stand-in devices


#: the calibration runs: ffn from two ubatch sizes, attention from a large context (with and without
#: flash attention), the floor from small ubatches over 1-8 slots, the output term from many outputs.
#: C0 and C1 are filled in per model (a context it supports).
DESIGN: tuple[DesignPoint, ...] = tuple(
    DesignPoint(f"{'mtp' if mtp else 'base'}:{name}", args, mtp, term)
    for mtp in (False, True)
    for name, args, term in (
        ("ffn-512", ("-c", "C0", "-np", "1", "-ub", "512", "-b", "1024"), "ffn"),
        ("ffn-1024", ("-c", "C0", "-np", "1", "-ub", "1024", "-b", "1024"), "ffn"),
        ("attn-fa", ("-c", "C3", "-np", "1", "-ub", "256", "-b", "1024"), "attention"),
        ("attn-nofa", ("-c", "C1", "-np", "1", "-ub", "256", "-b", "1024", "-fa", "off"), "attention"),
        ("attn-fa-long", ("-c", "C2", "-np", "1", "-ub", "256", "-b", "1024"), "attention"),
        ("floor-64x1", ("-c", "C0", "-np", "1", "-ub", "64", "-b", "1024"), "floor"),
        ("floor-64x4", ("-c", "C0", "-np", "4", "-ub", "64", "-b", "1024"), "floor"),
        ("floor-64x8", ("-c", "C0", "-np", "8", "-ub", "64", "-b", "1024"), "floor"),
        ("floor-512x8", ("-c", "C0", "-np", "8", "-ub", "512", "-b", "1024"), "floor"),
        ("floor-256x2", ("-c", "C0", "-np", "2", "-ub", "256", "-b", "1024"), "floor"),
        ("floor-128x3", ("-c", "C0", "-np", "3", "-ub", "128", "-b", "1024"), "floor"),
        *((("output", ("-c", "C0", "-np", "1", "-ub", "128", "-b", "1024", "--spec-draft-n-max", "32"), "output"),
           ("output-256", ("-c", "C0", "-np", "1", "-ub", "256", "-b", "1024", "--spec-draft-n-max", "6"), "output"))
          if mtp else ()),
    )
)


#: on two CPU-backed stand-in devices: the split terms of each device's buffer (calibrate.split_terms)
SPLIT_DESIGN: tuple[DesignPoint, ...] = tuple(
    DesignPoint(f"{'mtp' if mtp else 'base'}:{name}", args, mtp, "split", n)
    for mtp in (False, True)
    for name, args, n in (
        ("split-pipeline", ("-c", "C0", "-np", "1", "-ub", "512", "-b", "1024", "-ts", "1,1"), 2),
        ("split-partial", ("-c", "C0", "-np", "1", "-ub", "512", "-b", "1024", "-ts", "1,1", "-ngl", "NGL"), 2),
        ("split-single", ("-c", "C0", "-np", "1", "-ub", "512", "-b", "1024"), 1))
)


def design_args(p: DesignPoint, n_ctx_train: int, n_layer_all: int = 0) -> list[str]:
    """The point's arguments with its context sizes fitted to the model (C0 4096, C1 16384, C2 65536,
    all within the training context) and NGL a quarter of its layers (a partial offload)."""
    cap = n_ctx_train or 4096
    sizes = {"C0": str(min(4096, cap)), "C1": str(min(16384, cap)), "C2": str(min(65536, cap)), "C3": str(min(32768, cap)),
             "NGL": str(max(3, n_layer_all // 4))}
    args = [sizes.get(a, a) for a in p.args]
    return args + (["--spec-type", "draft-mtp"] if p.mtp else [])


@dataclass
class Features:
    """What one graph's buffer depends on at some settings (bytes, except T and n_seq)."""

    T: int
    n_seq: int
    fa: bool
    mask: float
    kq: float
    logits: float


def features(hp: HParams, r: Resolved, graph_name: str) -> Features:
    """The exact inputs of the calibrated form for `graph_name` at the resolved settings."""
    T = r.n_tokens
    draft = graph_name == "draft"
    layers = (hp.kv_draft or hp.nextn_layers()) if draft else hp.attention_layers()
    mask = float(graph.masks(hp, r, T, layers))
    nh = max(hp.n_head, default=0)
    kq = 0.0 if r.flash_attn else float(graph.widest_cells(hp, r, layers) * T * nh * 4)  # the f32 scores
    n_out = min(T, max(1, r.n_seq_max)) if draft else min(T, r.n_outputs_max)
    return Features(T, r.n_seq_max, r.flash_attn, mask, kq, float(n_out * hp.n_vocab * 4))


@dataclass
class GraphFit:
    """One graph's fitted terms (bytes; None: no design point put that term at the peak)."""

    mask_in_ffn: bool
    ffn: tuple[float, float] | None = None  # (c0, p)
    attn_fa: float | None = None  # q with flash attention
    attn_fa_mask: float = 1.0  # the share of the mask live at that peak (the draft's is below 1)
    attn_nofa: float | None = None  # q without
    floor: tuple[float, ...] | None = None  # (a, b, g, k, h, c)
    points: int = 0
    worst_rel: float = 0.0  # the largest relative residual on its own design points

    def terms(self, f: Features) -> dict[str, float]:
        """Each term's bytes at `f` (the unconstrained ones at their exact lower bounds)."""
        m = f.mask if self.mask_in_ffn else 0.0
        out: dict[str, float] = {}
        if self.ffn is not None:
            out["ffn"] = m + self.ffn[0] + self.ffn[1] * f.T
        q = self.attn_fa if f.fa else self.attn_nofa
        share = self.attn_fa_mask if f.fa and self.attn_fa is not None else 1.0
        out["attention"] = share * f.mask + f.kq + (q or 0.0) * f.T
        if self.floor is not None:
            a, b, g, k, h, c = self.floor
            out["floor"] = m + a + b * f.n_seq + g * f.T + (k + c * _chunks(f)) * f.logits + h * f.n_seq * f.T
        out["output"] = m + f.logits
        return out

    def predict(self, f: Features) -> float:
        return max(self.terms(f).values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphFit:
        def tup(v: Any) -> Any:
            return tuple(float(x) for x in v) if v is not None else None
        return cls(bool(d["mask_in_ffn"]), tup(d.get("ffn")), _opt(d.get("attn_fa")), float(d.get("attn_fa_mask", 1.0)),
                   _opt(d.get("attn_nofa")), tup(d.get("floor")), int(d.get("points", 0)), float(d.get("worst_rel", 0.0)))


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass
class Calibration:
    """A model's fitted compute terms, per graph, for one device kind and one llama-server build."""

    kind: str  # the backend that measured it ("CPU")
    digest: str  # the model's header hash
    binary: list[Any]  # the llama-server that measured it (path, size, mtime)
    graphs: dict[str, GraphFit] = field(default_factory=dict)
    seconds: float = 0.0
    runs: int = 0
    notes: list[str] = field(default_factory=list)
    #: each device role's split term in units of n_embd x T x 4 bytes (planning.calibrated_compute)
    split: dict[str, float] = field(default_factory=dict)

    def predict(self, hp: HParams, r: Resolved, graph_name: str) -> float | None:
        """Bytes of `graph_name`'s buffer at these settings on one device, or None when not calibrated."""
        g = self.graphs.get(graph_name)
        if g is None or g.ffn is None:
            return None
        return g.predict(features(hp, r, graph_name))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "digest": self.digest, "binary": self.binary,
                "graphs": {k: g.to_dict() for k, g in self.graphs.items()}, "seconds": self.seconds,
                "runs": self.runs, "notes": list(self.notes), "split": dict(self.split)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration | None:
        try:
            if d.get("format") != FORMAT:
                return None
            return cls(str(d["kind"]), str(d["digest"]), list(d["binary"]),
                       {k: GraphFit.from_dict(v) for k, v in d["graphs"].items()}, float(d.get("seconds", 0.0)),
                       int(d.get("runs", 0)), [str(n) for n in d.get("notes", [])],
                       {str(k): float(v) for k, v in d.get("split", {}).items()})
        except (KeyError, TypeError, ValueError):
            return None


# ---- fitting ---------------------------------------------------------------------------------


def _above(measured: float, predicted: float) -> bool:
    return measured > predicted + max(_TOL_ABS, _TOL_REL * measured)


def fit_graph(points: list[tuple[DesignPoint, Features, float]], mask_in_ffn: bool) -> GraphFit:
    """Fit one graph's terms from its design points (point, features, measured bytes)."""
    g = GraphFit(mask_in_ffn, points=len(points))
    m = (lambda f: f.mask) if mask_in_ffn else (lambda f: 0.0)  # noqa: E731
    ffn = [(f, v - m(f)) for p, f, v in points if p.term == "ffn"]
    if ffn:
        if len(ffn) >= 2 and ffn[-1][0].T != ffn[0][0].T:
            (f1, y1), (f2, y2) = ffn[0], ffn[-1]
            slope = (y2 - y1) / (f2.T - f1.T)
            g.ffn = (y1 - slope * f1.T, slope)
            if g.ffn[0] < 0:  # no negative constant: the line through the origin and the larger point
                g.ffn = (0.0, y2 / f2.T)
        else:
            f1, y1 = ffn[0]
            g.ffn = (0.0, y1 / f1.T)
    att = [(f, v) for p, f, v in points if p.term == "attention" and _above(v, g.predict(f))]
    for f, v in att:
        if not f.fa:
            g.attn_nofa = max(g.attn_nofa or 0.0, (v - f.mask - f.kq) / f.T)
    fa = sorted(((f, v) for f, v in att if f.fa), key=lambda fv: fv[0].mask)
    cands: list[tuple[float, float | None]] = [(1.0, None)]  # (the mask's share, q); None: no term
    cands += [(1.0, (v - f.mask) / f.T) for f, v in fa]
    if len(fa) >= 2 and fa[-1][0].T == fa[-2][0].T and fa[-1][0].mask > fa[-2][0].mask:
        (f1, v1), (f2, v2) = fa[-2], fa[-1]  # the two longest contexts: the mask's share of the peak
        share = (v2 - v1) / (f2.mask - f1.mask)
        if 0.25 <= share <= 2.0:
            cands.append((share, (v2 - share * f2.mask) / f2.T))
    best: tuple[float, float, float | None] | None = None
    for share, q in cands:  # the one that explains the graph's design points best
        g.attn_fa_mask, g.attn_fa = share, q
        errs = [abs(g.predict(f) - v) / v for _, f, v in points if v > 0]
        score = max(errs, default=0.0) + sum(errs) / max(1, len(errs))
        if best is None or score < best[0] - 1e-4:
            best = (score, share, q)
    _, g.attn_fa_mask, g.attn_fa = best  # type: ignore[misc]
    floors = [(f, v - m(f)) for p, f, v in points if p.term in ("floor", "output") and _above(v, g.predict(f))]
    if floors:  # the floor columns that predict best the design points they were not fitted on (a
        # plane through a few points extrapolates wildly): each subset scored by leave-one-out
        best: tuple[float, int, Any] = (_worst(g, points), 0, None)
        for sub in _subsets(("b", "g", "k", "h", "c")):
            score = _loo(g, floors, sub, points)
            if (round(score, 3), len(sub)) < (round(best[0], 3), best[1]):
                best = (score, len(sub), _fit_floor(floors, sub))
        g.floor = best[2]
    own = [abs(g.predict(f) - v) / v for _, f, v in points if v > 0]
    g.worst_rel = max(own, default=0.0)
    return g


def _loo(g: GraphFit, floors: list[tuple[Features, float]], sub: tuple[str, ...],
         points: list[tuple[DesignPoint, Features, float]]) -> float:
    """The worst relative error of the whole graph on its design points when the floor is fitted
    without the point being predicted (every point once; the fit on all of them for the others)."""
    worst = 0.0
    for i, (fi, _) in enumerate(floors):
        rest = floors[:i] + floors[i + 1:]
        if len(rest) < 1 + len(sub):
            return float("inf")
        g.floor = _fit_floor(rest, sub)
        worst = max(worst, max(abs(g.predict(f) - v) / v for _, f, v in points if f is fi))
    g.floor = _fit_floor(floors, sub)
    worst = max(worst, _worst(g, points))
    g.floor = None
    return worst


def _worst(g: GraphFit, points: list[tuple[DesignPoint, Features, float]]) -> float:
    return max((abs(g.predict(f) - v) / v for _, f, v in points if v > 0), default=0.0)


def _subsets(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for n in names:
        out += [s + (n,) for s in out]
    return out


def _fit_floor(pts: list[tuple[Features, float]], use: tuple[str, ...]) -> tuple[float, ...]:
    """a + b*n_seq + g*T + (k + c*chunks)*logits + h*n_seq*T by least squares on the points where the floor is the peak; a
    column the points cannot tell from the others (logits proportional to n_seq without MTP, one T
    only) is left out."""
    cols: list[tuple[str, list[float]]] = [("a", [1.0] * len(pts))]
    for name, vals in (("b", [float(f.n_seq) for f, _ in pts]), ("g", [float(f.T) for f, _ in pts]),
                       ("k", [f.logits for f, _ in pts]), ("h", [float(f.n_seq * f.T) for f, _ in pts]),
                       ("c", [f.logits * _chunks(f) for f, _ in pts])):
        if name in use and len(cols) < len(pts) and _independent([c for _, c in cols], vals):
            cols.append((name, vals))
    rows = [[c[i] for _, c in cols] for i in range(len(pts))]
    coef = _lstsq(rows, [y for _, y in pts])
    vals = dict(zip([n for n, _ in cols], coef))
    return (vals.get("a", 0.0), vals.get("b", 0.0), vals.get("g", 0.0), vals.get("k", 0.0), vals.get("h", 0.0),
            vals.get("c", 0.0))


def _chunks(f: Features) -> int:
    """64-token chunks per sequence in the ubatch (the chunked recurrent graphs' unit of work)."""
    return -(-f.T // (64 * max(1, f.n_seq)))


def _independent(cols: list[list[float]], v: list[float]) -> bool:
    """Whether `v` is not (nearly) a linear combination of `cols` (its residual after projection)."""
    coef = _lstsq([[c[i] for c in cols] for i in range(len(v))], v)
    resid = [v[i] - sum(k * c[i] for k, c in zip(coef, cols)) for i in range(len(v))]
    scale = max(abs(x) for x in v) or 1.0
    return max(abs(x) for x in resid) > 1e-6 * scale


def _lstsq(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares by the normal equations (at most three unknowns; no numpy in the core)."""
    n = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(n)]
    # Gauss-Jordan with partial pivoting
    for c in range(n):
        piv = max(range(c, n), key=lambda i: abs(ata[i][c]))
        if abs(ata[piv][c]) < 1e-12:
            return [0.0] * n
        ata[c], ata[piv] = ata[piv], ata[c]
        aty[c], aty[piv] = aty[piv], aty[c]
        for i in range(n):
            if i != c:
                k = ata[i][c] / ata[c][c]
                ata[i] = [a - k * b for a, b in zip(ata[i], ata[c])]
                aty[i] -= k * aty[c]
    return [aty[i] / ata[i][i] for i in range(n)]
