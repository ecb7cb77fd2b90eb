"""The host line under the VRAM bars: host RAM, the server's resident memory, and the spill warning.

Its own module because it is its own widget (render-only, one line, two when weights spill to host
memory); the device bars share its column widths and its reading of telemetry numbers.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.core.gpu.types import NA, GpuSnapshot
from tui.ui.cockpit.views import PlanView
from tui.ui.format import gib_pair, mib

#: the device label's and the right-hand figures' widths, shared by every bar of the panel
LABEL_W = 6
SUFFIX_W = 22


def num(value: object) -> float | None:
    """A telemetry figure as a float; None where NVML had none (NA) or nothing was sampled."""
    return None if value is NA or value is None else float(value)  # type: ignore[arg-type]


class HostBar(Widget):
    """Host RAM, the server's resident memory, and the spill warning when weights sit in host memory.

    Render-only: a new sample repaints this line without a layout pass.
    """

    DEFAULT_CSS = """
    HostBar { height: 1; color: $foreground-muted; }
    HostBar.-spill { height: 2; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._text = Text("host  RAM not sampled yet")

    def render(self) -> Text:
        return self._text

    def show(self, snapshot: GpuSnapshot | None, plan: PlanView | None, width: int) -> None:
        t = Text("host  ", no_wrap=True, overflow="ellipsis")
        if snapshot is None:
            t.append("RAM not sampled yet")
        else:
            total, avail = num(snapshot.host.ram_total_mib), num(snapshot.host.ram_available_mib)
            bar_w = max(10, width - LABEL_W - SUFFIX_W - 36)
            if total and avail is not None:
                used = total - avail
                cells = min(bar_w, round(used * bar_w / total))
                t.append("█" * cells)
                t.append("─" * (bar_w - cells))
                t.append(f"  RAM {gib_pair(used, total)}")
            else:
                t.append("RAM N/A")
            if snapshot.server is not None and snapshot.server.alive:
                t.append(f" · server RSS {mib(num(snapshot.server.rss_mib))}")
            if plan is not None and plan.host is not None and plan.host.needed_mib > 0:
                t.append(f" · plan: {mib(plan.host.needed_mib)} on host")
            if snapshot.spill is not None:
                t.append(f"\n      ⚠ {snapshot.spill.message}")
        self.set_class(bool(snapshot and snapshot.spill), "-spill")
        if t.plain != self._text.plain:
            self._text = t
            self.refresh()


def host_ram_of(snapshot: GpuSnapshot | None) -> tuple[float, float] | None:
    if snapshot is None:
        return None
    total, avail = num(snapshot.host.ram_total_mib), num(snapshot.host.ram_available_mib)
    return (total - avail, total) if total and avail is not None else None
