"""Sweeps: run a grid of llama-server configurations unattended, recover from OOMs, resume, and
report the best configuration.

Typical use (a UI runs `Sweep.run()` in a worker thread and shows the events; each name is
imported from its module: `definition`, `runner`, `results`):

    defn = build_definition(settings, ["mtp=on,off", "ub=256,512"], suite="tasks", repeat=3)
    sweep = Sweep(defn, server_bin=path, on_event=callback)   # callback(LabEvent), on the sweep thread
    outcome = sweep.run()                                      # sweep.cancel() from any thread
    table = build_table(defn, sweep.state)                     # rows, best, within noise, MTP break-even
                                                               # (sweep.state: its `lab.journal.Journal`)
    save_best(table, "my-best")                                # TOML profile + [my-best] INI section
"""
