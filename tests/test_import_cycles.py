"""No import cycles under tui/: a static import graph (ast over the source, nothing is imported).

Module-level imports must form no cycle at all (one would make import order matter). Imports inside
functions are checked as well, because a cycle hidden in a function is still two modules that each
need the other (the old `sweep.planning` <-> `sweep.runner` pair was such a cycle); the known ones
that remain are listed, so a new one fails and a fixed one must be taken off the list.

tui.core's subpackages are layered as well (an edge A -> B when any module of tui.core.A imports
from tui.core.B, inside functions too: a lazy import is still a design dependency). A subpackage
may import only from tiers below its own, never from its own tier or above (`LAYERS`):

    0  config options gpu        leaves: paths, llama-server's options as data, GPU telemetry
    1  results presets           the SQLite store; INI/TOML presets (read options)
    2  server                    launching, watching and talking to llama-server (records launches in presets)
    3  demo                      tiny generated MTP models (built with the provisioned server)
    4  planning                  GGUF header, device list, estimate, exact mode (dry runs a server)
    5  probes remote             PP/TG/acceptance measurements, statistics, comparison, break-even;
                                 models not on this disk (header by HTTP ranges, Hub resolution, variants)
    6  lab                       the one trial engine (launcher, failures, recovery, ranking, trial, journal,
                                 the loop) and its small strategies: the MTP on/off A/B, the knob searches
    7  sweep quality             grids of launches and probes (a strategy on the lab); output quality
                                 measured: KLD of KV types and quants by llama-perplexity, and the MTP
                                 on/off greedy agreement (which launches through the lab)
    8  tune                      the tune: its space, search, workload, report (a strategy on the lab)
    9  doctor                    checks everything above, so nothing imports it

A needed edge that points up or sideways means the code is in the wrong subpackage: move it down
(as `breakeven` moved from tuning to probes) rather than hide the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tui"

#: tui.core's subpackages, lowest tier first; see the module docstring.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"config", "options", "gpu"}),
    frozenset({"results", "presets"}),
    frozenset({"server"}),
    frozenset({"demo"}),
    frozenset({"planning"}),
    frozenset({"probes", "remote"}),
    frozenset({"lab"}),
    frozenset({"sweep", "quality"}),
    frozenset({"tune"}),
    frozenset({"doctor"}),
)

#: Function-level cycles that exist on purpose, as sorted module tuples (none today).
KNOWN_FUNCTION_LEVEL: set[tuple[str, ...]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, *, module_level_only: bool) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import node, at module level) for every import, skipping `if TYPE_CHECKING:` blocks."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(nodes: list[ast.stmt], top: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append((node, top))
            elif isinstance(node, ast.If) and _is_type_checking(node):
                walk(node.orelse, top)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not module_level_only:
                    walk(node.body, False)  # type: ignore[arg-type]
            elif isinstance(node, ast.ClassDef):
                walk(node.body, top)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    sub = getattr(node, field, None)
                    if isinstance(sub, list):
                        walk([s for s in sub if isinstance(s, ast.stmt)] +
                             [s for h in sub if isinstance(h, ast.ExceptHandler) for s in h.body], top)

    walk(tree.body, True)
    return found


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_pkg: bool, mods: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in mods}
    base = node.module or ""
    if node.level:
        parts = here.split(".")
        anchor = parts if is_pkg else parts[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    out = set()
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in mods:
            out.add(sub)
        elif base in mods:
            out.add(base)
    return out


def graph(*, module_level_only: bool) -> dict[str, set[str]]:
    mods = _modules()
    g: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node, _top in _imports(tree, module_level_only=module_level_only):
            edges |= _targets(node, name, path.name == "__init__.py", mods)
        edges.discard(name)
        g[name] = edges
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as one example path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # recursion depth is bounded by the module count
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return [_path(g, c) for c in comps]


def _path(g: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle through the component's first module, for the failure message."""
    start = comp[0]
    members = set(comp)
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(g[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def test_the_graph_sees_the_package() -> None:
    g = graph(module_level_only=True)
    assert "tui.core.planning.plan" in g and "tui.core.planning.accounting" in g["tui.core.planning.plan"]
    assert "tui.core.lab.planning" in g["tui.core.sweep.runner"]


def test_the_cycle_finder_finds_and_names_a_cycle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycle() -> None:
    found = cycles(graph(module_level_only=True))
    assert not found, "import cycles at module level: " + "; ".join(" -> ".join(c) for c in found)


def test_no_new_function_level_import_cycle() -> None:
    found = {tuple(sorted(set(c))): c for c in cycles(graph(module_level_only=False))}
    new = [c for k, c in found.items() if k not in KNOWN_FUNCTION_LEVEL]
    assert not new, "import cycles (counting imports inside functions): " + "; ".join(" -> ".join(c) for c in new)
    gone = KNOWN_FUNCTION_LEVEL - set(found)
    assert not gone, f"fixed cycles still listed in KNOWN_FUNCTION_LEVEL: {sorted(gone)}"


def subpackage_graph(*, module_level_only: bool = False) -> dict[str, set[str]]:
    """tui.core's subpackages as nodes: A -> B when any module in tui.core.A imports from tui.core.B."""
    g: dict[str, set[str]] = {}
    for mod, targets in graph(module_level_only=module_level_only).items():
        a = _core_subpackage(mod)
        if a is None:
            continue
        g.setdefault(a, set())
        for t in targets:
            b = _core_subpackage(t)
            if b is not None and b != a:
                g[a].add(b)
    return g


def _core_subpackage(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["tui", "core"] else None


def test_the_subpackage_graph_sees_the_layers() -> None:
    g = subpackage_graph()
    assert {"probes", "planning", "options"} <= g["lab"]  # module- and function-level edges both count
    assert "probes" in g["tune"] and "options" in g["server"]


def test_no_subpackage_cycle() -> None:
    found = cycles(subpackage_graph())
    assert not found, "tui.core subpackage cycles (imports inside functions count): " + "; ".join(
        " -> ".join(c) for c in found)


def layer_violations(g: dict[str, set[str]], layers: tuple[frozenset[str], ...] = LAYERS) -> list[str]:
    """Each edge that does not point to a lower tier, and each subpackage no tier names."""
    tier = {name: i for i, names in enumerate(layers) for name in names}
    out = [f"tui.core.{a} is in no tier of LAYERS" for a in sorted(g) if a not in tier]
    for a in sorted(g):
        for b in sorted(g[a]):
            if a in tier and b in tier and tier[b] >= tier[a]:
                out.append(f"{a} (tier {tier[a]}) imports {b} (tier {tier[b]})")
    return out


def test_the_layer_check_names_upward_and_sideways_edges() -> None:
    layers = (frozenset({"a", "b"}), frozenset({"c"}))
    assert layer_violations({"a": set(), "b": {"a"}, "c": {"a", "b"}, "d": set()}, layers) == [
        "tui.core.d is in no tier of LAYERS", "b (tier 0) imports a (tier 0)"]
    assert layer_violations({"a": {"c"}, "c": {"a"}}, layers) == ["a (tier 0) imports c (tier 1)"]


def test_subpackages_import_only_lower_tiers() -> None:
    bad = layer_violations(subpackage_graph())
    assert not bad, "tui.core layering (see this test's docstring; move the code down a tier): " + "; ".join(bad)
