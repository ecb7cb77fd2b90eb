"""The tune behind `mtp-tune tune`: an MTP-aware search of a `space` for a `workload` (`search`), one
candidate at a time on the lab's trial loop (`trial`) over a `machine`, run on the real one by `run`,
answered and reported by `result`. Modules are imported directly; nothing is re-exported here."""
