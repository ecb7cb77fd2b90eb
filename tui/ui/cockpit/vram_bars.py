"""Per-GPU VRAM bars: live use from telemetry and the plan for the settings on screen.

Each device shows the plan as stacked segments (weights, KV, draft KV, recurrent, compute, output)
on top of what others already use, the fit-target margin as a marker, and the risk in words and
colour; a second bar shows live used memory with processes that are not ours flagged.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from tui.core.config.text import safe_text
from tui.core.gpu.types import NA, GpuDevice, GpuSnapshot
from tui.ui.format import gib_pair, markup_safe, mib, plain
from tui.ui.cockpit.host_bar import LABEL_W, SUFFIX_W, HostBar, host_ram_of, num
from tui.ui.cockpit.views import EXACT_LABEL, SEGMENTS, DevicePlan, PlanView

RISK_WORDS = {"ok": "● OK", "tight": "▲ TIGHT", "oom": "✖ OOM"}


class DeviceBar(Widget):
    """One device: title with risk, plan bar, live bar, legend with sizes."""

    COMPONENT_CLASSES = {
        "devicebar--weights", "devicebar--kv", "devicebar--draft_kv", "devicebar--recurrent",
        "devicebar--compute", "devicebar--output", "devicebar--other", "devicebar--free",
        "devicebar--ok", "devicebar--tight", "devicebar--oom", "devicebar--title", "devicebar--dim",
        "devicebar--simulated", "devicebar--ours", "devicebar--foreign",
    }
    DEFAULT_CSS = """
    DeviceBar { height: 4; }
    DeviceBar.-foreign { height: 5; }
    DeviceBar .devicebar--weights { color: $plan-weights; }
    DeviceBar .devicebar--kv { color: $plan-kv; }
    DeviceBar .devicebar--draft_kv { color: $plan-draft-kv; }
    DeviceBar .devicebar--recurrent { color: $plan-recurrent; }
    DeviceBar .devicebar--compute { color: $plan-compute; }
    DeviceBar .devicebar--output { color: $plan-output; }
    DeviceBar .devicebar--other { color: $plan-other; }
    DeviceBar .devicebar--free { color: $foreground-darken-3; }
    DeviceBar .devicebar--ok { color: $success; text-style: bold; }
    DeviceBar .devicebar--tight { color: $warning; text-style: bold; }
    DeviceBar .devicebar--oom { color: $error; text-style: bold reverse; }
    DeviceBar .devicebar--title { text-style: bold; }
    DeviceBar .devicebar--dim { color: $foreground-muted; }
    DeviceBar .devicebar--simulated { color: $accent; text-style: bold; }
    DeviceBar .devicebar--ours { color: $primary; }
    DeviceBar .devicebar--foreign { color: $warning; }
    """

    plan: reactive[DevicePlan | None] = reactive(None)
    live: reactive[GpuDevice | None] = reactive(None)
    simulated: reactive[bool] = reactive(False)
    #: Why there is no plan (shown in place of the plan bar), e.g. the planner's error.
    no_plan_reason: reactive[str] = reactive("no plan yet")
    #: (used, total) MiB of host RAM: the live line of a CPU-only plan's host device (None otherwise).
    host_ram: reactive[tuple[float, float] | None] = reactive(None)
    stale: reactive[bool] = reactive(False)  # the plan is the last valid settings' (a field is invalid)

    def __init__(self, index: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.index = index
        self.gpu_index = index  # among the GPUs only (RPC devices come first in the plan)

    @property
    def kind(self) -> str:
        return self.plan.kind if self.plan is not None else "gpu"

    def _prefix(self) -> str:
        """What the device is: `GPU0`, `host RAM` (no GPU: the plan is for host memory), or `RPC0 host:port`."""
        if self.kind == "host":
            return "host RAM"
        if self.kind == "rpc" and self.plan is not None:
            return safe_text(f"{self.plan.name} {self.plan.key[len('RPC0['):-1]}")  # an RPC server named itself
        return f"GPU{self.gpu_index}"

    def _cstyle(self, name: str) -> Style:
        return self.get_component_rich_style(f"devicebar--{name}", partial=True)

    def render(self) -> Text:
        width = max(30, self.size.width)
        bar_w = max(10, width - LABEL_W - SUFFIX_W)
        lines = [self._title_line(width), self._plan_line(bar_w), self._live_line(bar_w, width), self._legend()]
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "ellipsis"
        return text

    def _device_name(self) -> str:
        if self.kind in ("host", "rpc"):
            return "(remote)" if self.kind == "rpc" else ""
        if self.plan is not None:
            return safe_text(self.plan.name)
        if self.live is not None and self.live.name is not NA:
            return safe_text(self.live.name).replace(" (simulated)", "")
        return "device"

    def _title_line(self, width: int) -> Text:
        t = Text()
        name = self._device_name()
        t.append(f"{self._prefix()} " if name else self._prefix(), self._cstyle("title"))
        if width < 100 or (self.plan is not None and width < 130):  # room for the plan's source words
            name = name.replace("NVIDIA ", "").replace("GeForce ", "")
        t.append(name, self._cstyle("title"))
        total = self.plan.total_mib if self.plan else num(self.live.memory_total_mib) if self.live else None
        t.append(f"  {mib(total)}", self._cstyle("dim"))
        if self.simulated:
            t.append("  [SIMULATED]", self._cstyle("simulated"))
        if self.plan is not None:
            risk = self.plan.risk if self.plan.risk in RISK_WORDS else "ok"
            right = Text()
            right.append(f"{RISK_WORDS[risk]} ", self._cstyle(risk))
            if risk == "oom":
                right.append(f" short by {mib(-self.plan.headroom_mib)}", self._cstyle("dim"))
            else:
                right.append(f" headroom {mib(self.plan.headroom_mib)}", self._cstyle("dim"))
                if risk == "tight":
                    right.append(f" < margin {mib(self.plan.margin_mib)}", self._cstyle("dim"))
            # where the plan's figures come from (llama.cpp's dry run, or the estimate), where it fits
            source = Text("  plan: ", self._cstyle("dim"))
            src = self.plan.source
            said, style = ("STALE", "tight") if self.stale else (src, "title" if src == EXACT_LABEL else "dim")
            source.append(said, self._cstyle(style))
            if t.cell_len + source.cell_len + 2 + right.cell_len <= width:
                t.append_text(source)
            pad = width - t.cell_len - right.cell_len
            t.append(" " * max(2, pad))
            t.append_text(right)
        t.truncate(width)
        return t

    def _plan_line(self, bar_w: int) -> Text:
        t = Text("plan  ", self._cstyle("dim"))
        p = self.plan
        if p is None or p.total_mib <= 0:
            t.append("─" * bar_w, self._cstyle("free"))
            t.append(f"  {self.no_plan_reason}", self._cstyle("dim"))
            return t
        scale = bar_w / p.total_mib
        cells: list[tuple[str, str]] = []
        cum = 0.0
        end_prev = 0
        parts = [("other", "█", p.in_use_mib)] + [(k, g, p.segment_mib(k)) for k, _label, g in SEGMENTS]
        for key, glyph, size in parts:
            cum += max(0.0, size)
            end = min(bar_w, round(cum * scale))
            cells.extend((glyph, key) for _ in range(end - end_prev))
            end_prev = max(end_prev, end)
        cells.extend(("─", "free") for _ in range(bar_w - len(cells)))
        risk = p.risk if p.risk in RISK_WORDS else "ok"
        mark = round((p.total_mib - p.margin_mib) * scale)
        if 0 <= mark < bar_w and p.margin_mib > 0:
            cells[mark] = ("┃", risk)
        overflow = p.in_use_mib + p.needed_mib > p.total_mib
        if overflow:
            cells[-1] = ("✖", "oom")
        for glyph, key in cells:
            t.append(glyph, self._cstyle(key))
        t.append(f"  {gib_pair(p.in_use_mib + p.needed_mib, p.total_mib)}", self._cstyle(risk if overflow else "dim"))
        return t

    def _live_line(self, bar_w: int, width: int) -> Text:
        t = Text("used  ", self._cstyle("dim"))
        d = self.live
        if d is None and self.kind != "gpu":
            t = self._other_live(t, bar_w)
            t.truncate(width)
            return t
        if d is None:
            t.append("─" * bar_w, self._cstyle("free"))
            t.append("  no live reading", self._cstyle("dim"))
            return t
        if d.error:
            t.append(f"device error: {d.error}", self._cstyle("oom"))
            return t
        total, used = num(d.memory_total_mib), num(d.memory_used_mib)
        if not total or used is None:
            t.append("─" * bar_w, self._cstyle("free"))
            t.append("  memory N/A", self._cstyle("dim"))
            return t
        ours = sum(num(p.used_memory_mib) or 0.0 for p in d.processes if p.is_ours)
        ours_cells = min(bar_w, round(ours * bar_w / total))
        used_cells = min(bar_w, max(ours_cells, round(used * bar_w / total)))
        t.append("█" * ours_cells, self._cstyle("ours"))
        t.append("█" * (used_cells - ours_cells), self._cstyle("other"))
        t.append("─" * (bar_w - used_cells), self._cstyle("free"))
        t.append(f"  {gib_pair(used, total)}", self._cstyle("dim"))
        foreign = [p for p in d.processes if not p.is_ours]
        if foreign:
            t.append(f" ⚠{len(foreign)}", self._cstyle("foreign"))
            names = ", ".join(f"{safe_text(p.name)} {mib(num(p.used_memory_mib))}" for p in foreign[:2])
            more = f" +{len(foreign) - 2}" if len(foreign) > 2 else ""
            note = Text(f"\n      ⚠ not ours: {names}{more}", self._cstyle("foreign"))
            note.truncate(width)
            t.append_text(note)
        return t

    def _other_live(self, t: Text, bar_w: int) -> Text:
        """Host RAM (from the host sample) or an RPC server's memory (as it reported it)."""
        p = self.plan
        if self.kind == "host" and self.host_ram is not None:
            used, total = self.host_ram
            note = ""
        elif self.kind == "rpc" and p is not None and p.note and not p.note.startswith("memory unknown"):
            used, total = max(0.0, p.total_mib - p.free_mib), p.total_mib
            note = p.note
        else:
            t.append("─" * bar_w, self._cstyle("free"))
            t.append(f"  {p.note if p is not None and p.note else 'no live reading'}", self._cstyle("dim"))
            return t
        bar_w = max(10, bar_w - (len(note) + 1 if note else 0))  # the note says where the figure comes from
        cells = min(bar_w, round(used * bar_w / total)) if total else 0
        t.append("█" * cells, self._cstyle("other"))
        t.append("─" * (bar_w - cells), self._cstyle("free"))
        t.append(f"  {gib_pair(used, total)}{' ' + note if note else ''}", self._cstyle("dim"))
        return t

    def _legend(self) -> Text:
        t = Text("      ")
        p = self.plan
        if p is None:
            return t
        for key, label, glyph in SEGMENTS:
            size = p.segment_mib(key)
            if size <= 0 and key in ("recurrent", "draft_kv", "output"):
                continue
            t.append(glyph, self._cstyle(key))
            band = p.band_pct(key)  # the estimate's measured error, where it is worth saying
            t.append(f" {label} {mib(size)}{f' ±{band:.0f} %' if band is not None and band >= 1 else ''}  ",
                     self._cstyle("dim"))
        t.append("┃", self._cstyle("dim"))
        t.append(f" fit margin {mib(p.margin_mib)}", self._cstyle("dim"))
        return t

    def watch_live(self, old: GpuDevice | None, new: GpuDevice | None) -> None:
        self.set_class(bool(new and any(not p.is_ours for p in new.processes)), "-foreign")


#: Shown when there is no GPU and none is simulated (profiles: tui.core.gpu.profiles).
NO_GPU_TEXT = "no GPU: planning for host RAM · try --gpus rtx3060-laptop-6g (rtx3090-24g, 2x16GiB…) to plan for a GPU"
TITLE = "VRAM: live use and the plan for the settings on screen"


class VramBars(Vertical):
    """All devices plus host memory. The App calls `show()`; this widget sends no messages."""

    DEFAULT_CSS = """
    VramBars { height: auto; border: round $foreground 25%; border-title-color: $foreground; padding: 0 1; }
    VramBars > #telemetry-status { color: $foreground-muted; height: 1; }
    VramBars > #telemetry-status.-simulated { color: $accent; }
    VramBars > #quality-line { color: $foreground-muted; height: auto; display: none; }
    VramBars > #plan-notes { color: $warning; height: auto; }
    VramBars > #plan-notes.-error { color: $error; }
    VramBars > #devices { height: auto; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: dict[str, tuple[str, tuple[tuple[str, bool], ...]]] = {}
        #: The device bars in order. Kept here, not queried: a removal is finished by Textual later, so
        #: a query right after one (two plans in a row changing the count) would still see the old bars.
        self._bars: list[DeviceBar] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="telemetry-status")
        yield Vertical(id="devices")
        yield HostBar(id="host-bar")
        yield Static("", id="quality-line")
        yield Static("", id="plan-notes")

    def on_mount(self) -> None:
        self.border_title = TITLE

    def show(self, plan: PlanView | None, snapshot: GpuSnapshot | None) -> None:
        """Attributes down: the App hands over the newest plan and snapshot."""
        n_plan = len(plan.devices) if plan else 0
        n_live = len(snapshot.devices) if snapshot else 0
        count = max(n_plan, n_live)
        try:
            box = self.query_one("#devices", Vertical)
        except NoMatches:
            return  # shutting down: a late sample after the children went away
        bars = self._bars
        if len(bars) != count:  # keep the bars that stay (their state), add or drop the rest at the end
            for bar in bars[count:]:
                bar.remove()
            added = [DeviceBar(i) for i in range(len(bars), count)]
            if added:
                box.mount_all(added)
            self._bars = bars = bars[:count] + added
        simulated = bool(snapshot and snapshot.simulated)
        host_ram = host_ram_of(snapshot)
        gpus = iter(snapshot.devices if snapshot else ())
        gpu_index = 0
        for i, bar in enumerate(bars):
            bar.gpu_index = gpu_index
            dev_plan = plan.devices[i] if plan and i < n_plan else None
            bar.host_ram = host_ram if dev_plan is not None and dev_plan.kind == "host" else None
            bar.plan = dev_plan
            live = next(gpus, None) if dev_plan is None or dev_plan.kind == "gpu" else None
            gpu_index += 1 if dev_plan is None or dev_plan.kind == "gpu" else 0
            bar.live = live
            bar.simulated = (simulated and bar.kind == "gpu") or bool(live and live.simulated)
            bar.no_plan_reason = "no plan: see below" if plan is not None and plan.error else "no plan yet"
            bar.stale = bool(plan and plan.stale)
        if snapshot is None:
            status_text = "telemetry: waiting for the first sample"
        elif n_live == 0 and not simulated:
            status_text = NO_GPU_TEXT
        else:
            status_text = f"{'SIMULATED: ' if simulated else ''}{snapshot.message}"
        self._set("#telemetry-status", status_text, {"-simulated": simulated})
        self.query_one(HostBar).show(snapshot, plan, self.size.width or 116)
        note = plan.notes if plan is not None else ""
        self._set("#plan-notes", note, {"-error": bool(plan and (plan.error or plan.stale))}, hide_empty=True)
        subtitle = plan.exact_status if plan is not None and (plan.stale or not plan.error) else ""
        if self.border_subtitle != subtitle:
            self.border_subtitle = subtitle

    def status(self, text: str) -> None:
        """A background job's few words after the title ("calibrating the estimate 3/21"; "": none)."""
        self.border_title = f"{TITLE} · {text}" if text else TITLE

    def quality(self, text: str) -> None:
        """What the K/V types on screen cost in output quality (cockpit/quality.py; "" hides the line)."""
        self._set("#quality-line", text, {}, hide_empty=True)

    def busy(self, text: str) -> None:
        """Say what the plan is waiting for (a remote header being read); the next `show` replaces it."""
        self.border_subtitle = markup_safe(text)  # a remote model's name: markup and escapes shown as typed

    def _set(self, selector: str, text: str, classes: dict[str, bool], hide_empty: bool = False) -> None:
        """Update a Static only when its text changed: a sample a second must not re-layout the screen."""
        if self._shown.get(selector) == (text, tuple(sorted(classes.items()))):
            return
        self._shown[selector] = (text, tuple(sorted(classes.items())))
        widget = self.query_one(selector, Static)
        widget.update(plain(text, keep_lines=True))  # a plan's error quotes the server and the file names
        for name, on in classes.items():
            widget.set_class(on, name)
        if hide_empty:
            widget.display = bool(text)
