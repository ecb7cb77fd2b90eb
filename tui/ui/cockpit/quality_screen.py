"""The quality-vs-memory screen (`D`): a table of K/V types (KV memory, saving against f16, mean KLD, same
top token) and a small plot of KLD against KV memory; rows come from `quality_memory.memory_view`.

It is handed either the view (a fixed preview) or the function that makes it, which runs on a worker
(it plans each K/V type and reads the quality index); the worker returns the view, and the screen
shows it when the worker succeeds. This screen sends no messages and starts no measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState

from tui.core.quality.index import kld_text
from tui.ui.cockpit.quality_memory import QualityMemoryRow, QualityMemoryView
from tui.ui.format import cell, markup_safe, mib, plain
from tui.ui.lab.charts import pad
from tui.ui.widgets.probe_plot import Plot

COLUMNS = ("K/V", "KV memory", "saved vs f16", "mean KLD", "same top %", "measured")


def cells(r: QualityMemoryRow) -> list[str]:
    """A row as the table shows it (`—` where a figure is unknown; never a guess)."""
    saving = "—" if r.saving_mib is None else "0" if abs(r.saving_mib) < 0.5 else f"{mib(r.saving_mib)}"
    return [f"{r.kv.k}/{r.kv.v}" + (" ◀" if r.current else ""), mib(r.kv_mib) if r.kv_mib is not None else "—",
            saving, "—" if r.kld is None else kld_text(r.kld),
            "—" if r.same_top_pct is None else f"{r.same_top_pct:.1f}", r.said]


def _bold(text: Text) -> Text:
    text.stylize("bold")
    return text


class QualityChart(Plot):
    """`show(rows)`: mean KLD against KV memory for the rows with both figures; the types on screen a star."""

    def on_resize(self) -> None:
        self._redraw()  # which labels fit depends on the size (a small terminal drops those that collide)

    def draw(self, plt: Any, colours: list[Any]) -> None:
        rows: list[QualityMemoryRow] = [r for r in (self.data or ()) if r.kld is not None and r.kv_mib is not None]
        plt.title("mean KLD vs KV memory (MiB) · ★ on screen")
        others, mine = [r for r in rows if not r.current], [r for r in rows if r.current]
        if others:
            plt.scatter([r.kv_mib for r in others], [r.kld for r in others], marker="●", color=colours[0])
        if mine:
            plt.scatter([r.kv_mib for r in mine], [r.kld for r in mine], marker="★", color=colours[1], style="bold")
        if not rows:
            plt.xticks([])
            plt.yticks([])
            return
        xs, ys = [float(r.kv_mib or 0) for r in rows], [float(r.kld or 0) for r in rows]
        px, py = pad(min(xs), max(xs)), max(1e-4, (max(ys) - min(ys)) * 0.15)
        x0, x1, y0, y1 = min(xs) - px, max(xs) + 2 * px, max(0.0, min(ys) - py), max(ys) + py
        plt.xlim(x0, x1)
        plt.ylim(y0, y1)  # a divergence is never below 0: no negative axis
        cols, lines = max(20, self.size.width - 10), max(2, self.size.height - 5)  # the plot area, about
        step, taken = (x1 - x0) / cols, []
        for r in sorted(rows, key=lambda r: not r.current):  # the types on screen labelled first
            label = r.kv.k if r.kv.k == r.kv.v else f"{r.kv.k}/{r.kv.v}"
            x, y = float(r.kv_mib or 0), float(r.kld or 0)
            line, col = (y - y0) / (y1 - y0) * lines, round((x - x0) / step)
            if any(abs(line - t_line) < 1 and col <= t_end and t_col <= col + len(label) + 2
                   for t_line, t_col, t_end in taken):
                continue  # it could print over another label (a small terminal): the table names it
            taken.append((line, col, col + len(label) + 2))
            plt.text(label, x + 2 * step, y, alignment="left", color=colours[1] if r.current else colours[0])


class QualityMemoryScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    QualityMemoryScreen { align: center middle; }
    QualityMemoryScreen > Vertical { width: 110; max-width: 100%; height: 90%; border: round $primary;
                                     background: $surface; padding: 0 1; }
    QualityMemoryScreen #qm-table { height: auto; max-height: 14; }
    QualityMemoryScreen #qm-plot { height: 1fr; min-height: 8; }
    QualityMemoryScreen #qm-note { height: auto; color: $foreground-muted; }
    QualityMemoryScreen #qm-note.-error { color: $error; }
    """
    BINDINGS = [Binding("escape,q,D", "dismiss", "Close", id="quality_screen.close")]

    def __init__(self, source: QualityMemoryView | Callable[[], QualityMemoryView]) -> None:
        super().__init__()
        self.source = source
        self.view: QualityMemoryView | None = source if isinstance(source, QualityMemoryView) else None

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Quality vs memory"
            yield DataTable(id="qm-table", cursor_type="none", zebra_stripes=True)
            yield QualityChart(id="qm-plot")
            yield Static("planning each K/V type and reading what is measured…", id="qm-note")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#qm-table", DataTable).add_columns(*COLUMNS)
        if self.view is not None:
            self.show(self.view)
        elif callable(self.source):
            self.run_worker(self.source, thread=True, exit_on_error=False, group="quality-memory")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "quality-memory":
            return
        if event.state == WorkerState.SUCCESS and isinstance(event.worker.result, QualityMemoryView):
            self.show(event.worker.result)
        elif event.state == WorkerState.ERROR:  # memory_view never raises; a bug is said, not a crash
            self.show(QualityMemoryView("Quality vs memory", error=f"the view failed ({event.worker.error})"))

    def show(self, view: QualityMemoryView) -> None:
        self.view = view
        self.query_one(Vertical).border_title = markup_safe(view.title)
        table = self.query_one("#qm-table", DataTable)
        table.clear()
        for r in view.rows:
            table.add_row(*(_bold(cell(c)) if r.current else cell(c) for c in cells(r)))
        self.query_one(QualityChart).show(view.rows)
        note = self.query_one("#qm-note", Static)
        note.update(plain(view.error or view.note))
        note.set_class(bool(view.error), "-error")
