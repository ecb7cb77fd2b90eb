"""Tuning actions over one configuration: the MTP on/off verdict and the knob searches.

Each action blocks; a UI runs it in a worker, reads `lab.events.LabEvent`s from the `on_event`
callback (on the worker's thread: post them, never touch widgets) and cancels by setting the
`threading.Event` it passed as `cancel`, from any thread.

    v = ab.run_ab(settings, "tasks", (1000, 500), passes=3, server_bin=path, on_event=post, cancel=ev)
    v.label, v.answer, v.break_even       # mtp_wins | mtp_loses | inconclusive, in words, the length
    v.for_workload(13000, 200)            # the same samples judged for another request shape
    r = searches.largest_ctx(settings, server_bin=path, on_event=post, cancel=ev)
    r = searches.smallest_fit_target(settings, server_bin=path, on_event=post, cancel=ev)
    r.settings, r.trials, r.message       # the new setting to offer, the evidence, one sentence
"""
