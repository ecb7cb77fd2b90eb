"""Sweeps: run a grid of llama-server configurations unattended, recover from OOMs, resume, and
report the best configuration.

Typical use (a UI runs `Sweep.run()` in a worker thread and shows the events):

    defn = build_definition(settings, ["mtp=on,off", "ub=256,512"], suite="tasks", repeat=3)
    sweep = Sweep(defn, server_bin=path, on_event=callback)   # callback(LabEvent), on the sweep thread
    outcome = sweep.run()                                      # sweep.cancel() from any thread
    table = build_table(defn, sweep.state)                     # rows, best, within noise, MTP break-even
    save_best(table, "my-best")                                # TOML profile + [my-best] INI section
"""

from tui.core.lab.axis import Axis
from tui.core.sweep.axes import Limits, Objective, SweepDefinitionError, parse_axis, parse_objective
from tui.core.sweep.definition import Configuration, SweepDefinition, build_definition
from tui.core.sweep.best import save_best
from tui.core.sweep.results import SweepTable, TableRow, build_table
from tui.core.sweep.events import SweepError, SweepOutcome
from tui.core.sweep.planning import PlanVerdict, default_planner
from tui.core.sweep.runner import Sweep
from tui.core.sweep.state import RowResult, SweepState, StateError, list_states, load_state

__all__ = [
    "Axis", "Configuration", "Limits", "Objective", "PlanVerdict", "RowResult",
    "StateError", "Sweep", "SweepDefinition", "SweepDefinitionError", "SweepError",
    "SweepOutcome", "SweepState", "SweepTable", "TableRow", "build_definition", "build_table",
    "default_planner", "list_states", "load_state", "parse_axis", "parse_objective", "save_best",
]
