"""Memory after a launch (`m`): estimate, exact (llama.cpp's dry run), reported and NVML side by side.

One row per device and component, then each device's total; NVML reports one figure per GPU (what
our server's process holds there), so it fills the total row's column, and only on a real GPU.
The App hands over the rows and NVML's figures; this screen sends no messages.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tui.ui.cockpit.views import ReconcileRow

COMPONENT_NAMES = {"kv": "KV", "draft_kv": "draft KV", "draft_compute": "draft compute"}
NAME_W = 22
NUM_W = 11


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _err(v: float | None, ref: float | None) -> str:
    if v is None or ref is None:
        return ""
    d = v - ref
    return "=" if abs(d) < 0.005 else f"{d:+.2f}"


def columns(nvml: dict[str, float] | None) -> tuple[str, ...]:
    """The figures' columns: three, or four on a real GPU."""
    return ("estimate", "exact", "reported", *(("NVML",) if nvml is not None else ()))


def table_text(rows: tuple[ReconcileRow, ...], nvml: dict[str, float] | None, exact_reason: str = "") -> str:
    """The side-by-side table as plain text (MiB), one block per device."""
    if not rows:
        return "nothing to compare yet: launch the server (l); the comparison appears once it is ready."
    cols = columns(nvml)
    head = "component".ljust(NAME_W) + "".join(c.rjust(NUM_W) for c in cols) + "  est−rep".rjust(NUM_W) + \
        "  exact−rep".rjust(NUM_W + 2)
    by_device: dict[str, list[ReconcileRow]] = {}
    for r in rows:
        by_device.setdefault(r.device, []).append(r)
    has_exact = any(r.exact_mib is not None for r in rows)
    out = ["MiB, per device and component" + ("" if has_exact else " (no exact figures: see below)"), ""]
    for device, drows in by_device.items():
        out += [f"{device}", head]
        tot = {"estimate": 0.0, "exact": 0.0, "reported": 0.0}
        for r in drows:
            name = COMPONENT_NAMES.get(r.component, r.component)
            cells = [_num(r.predicted_mib), _num(r.exact_mib), _num(r.reported_mib)]
            if nvml is not None:
                cells.append("")
            line = f"  {name}".ljust(NAME_W) + "".join(c.rjust(NUM_W) for c in cells)
            line += _err(r.predicted_mib, r.reported_mib).rjust(NUM_W) + _err(r.exact_mib, r.reported_mib).rjust(NUM_W + 2)
            out.append(line)
            tot["estimate"] += r.predicted_mib or 0.0
            tot["exact"] += r.exact_mib or 0.0
            tot["reported"] += r.reported_mib or 0.0
        ex_total = tot["exact"] if any(r.exact_mib is not None for r in drows) else None
        cells = [_num(tot["estimate"]), _num(ex_total), _num(tot["reported"])]
        if nvml is not None:
            cells.append(_num(nvml.get(device)))
        line = "  total".ljust(NAME_W) + "".join(c.rjust(NUM_W) for c in cells)
        line += _err(tot["estimate"], tot["reported"]).rjust(NUM_W) + _err(ex_total, tot["reported"]).rjust(NUM_W + 2)
        out += [line, ""]
    if not has_exact:
        out.append(f"exact unavailable: {exact_reason}" if exact_reason else "exact: llama.cpp's dry run is on its way…")
    if nvml is None:
        out.append("NVML: no real GPU reading here (CPU backend or simulated devices), so three columns.")
    else:
        out.append("NVML: what this server's process holds on each GPU (CUDA context and pool included).")
    return "\n".join(out)


class ReconcileScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    ReconcileScreen { align: center middle; }
    ReconcileScreen > VerticalScroll { width: 100; max-width: 100%; height: 90%; border: round $primary; background: $surface; padding: 0 1; }
    ReconcileScreen #reconcile-table { width: auto; text-wrap: nowrap; }
    """
    BINDINGS = [Binding("escape,q,m", "dismiss", "Close", id="memory_screen.close")]

    def __init__(self, rows: tuple[ReconcileRow, ...], nvml: dict[str, float] | None, exact_reason: str = "") -> None:
        super().__init__()
        self._text = table_text(rows, nvml, exact_reason)
        self._title = "Memory after launch: " + " · ".join(columns(nvml))

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = self._title
            yield Static(self._text, id="reconcile-table", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()  # arrows, PgUp/PgDn and Home/End scroll at once (no Tab first)
