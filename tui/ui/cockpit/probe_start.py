"""The cockpit's probe key (`p`): the run starts with the probe panel's suite and "at once" field, after
the checks that need the screen: the field read by the core's rule, and a server with fewer slots
than the requests at once.

Too few slots is one line (the core's `slots_problem`). For a server mtp-tune launched, the fix is
offered as a question: put `-np N` (and the context each slot had) in the form, where `r` restarts
with it through the usual launch question (planned first: the KV cache grows with the slots). A server
mtp-tune only watches cannot be relaunched from here, so the line says what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tui.core.options.settings import Settings
from tui.ui.host import Notice
from tui.ui.widgets.question import Answer, Question

if TYPE_CHECKING:
    from tui.ui.cockpit.screen import MainScreen

TITLE = "Cannot probe"


def at_once(main: MainScreen, title: str = TITLE) -> int | None:
    """The probe panel's requests at once (the probes' and the MTP on/off run's); None, the reason
    said under `title`, when the field is not a count."""
    # lazy: the probe statistics load with the first probe run, not before the first frame
    from tui.core.probes.concurrency import parse_concurrency

    try:
        return parse_concurrency(main.probe_panel.concurrency_text)
    except ValueError as exc:
        main._notice(Notice(str(exc), title))
        return None


def run_probes(main: MainScreen) -> None:
    """Start the probe run the panel asks for, or say in one line why not (or ask about the slots)."""
    refused = main.probes.refused(main.server.status)
    if refused is not None:
        main._notice(refused)
        return
    if (n := at_once(main)) is None:
        return
    running = main.server.running_settings()
    managed = not main.server.status.attached  # mtp-tune launched it: a restart can give it the slots
    fix = f"restart it with -np {n}" if managed else f"relaunch it with -np {n}, or probe fewer at once"
    why = main.probes.too_few_slots(running, n, fix)
    if why is None:
        main.probe_panel.show(main.probes.start(main.probe_panel.suite, main.plan.settings, n))
    elif managed and running is not None:
        main.app.push_screen(slots_question(why, main.plan.settings, n),
                             lambda choice: main.form.load(widened(main.plan.settings, n)) if choice == "form" else None)
    else:
        main._notice(Notice(why, TITLE, timeout=12))


def widened(form: Settings, n: int) -> Settings:
    """The form's settings for `n` requests at once: `-np n`, each slot keeping the context one had
    (the core's `rescale_slots`; a form without -np is taken as one slot's)."""
    # lazy: the probe statistics load with the first probe run, not before the first frame
    from tui.core.probes.concurrency import rescale_slots

    return rescale_slots(form, form.parallel if form.parallel and form.parallel > 0 else 1, n)


def slots_question(why: str, form: Settings, n: int) -> Question:
    """Too few slots, and the offer to put `-np n` in the form (nothing restarts until `r`)."""
    wide = widened(form, n)
    ctx = f" and -c {wide.ctx_size} ({form.ctx_size} tokens per slot, as now)" if wide.ctx_size != form.ctx_size else ""
    return Question(f"{n} requests at once need {n} slots", [
        why,
        f"Put -np {n}{ctx} in the form? r then restarts with it, planned first (the KV cache grows with the slots).",
    ], [Answer("form", "Put it in the form", key="y")])
