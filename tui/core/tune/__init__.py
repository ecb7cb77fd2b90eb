"""The tune behind `mtp-tune tune`: an MTP-aware search of a `space` for a `workload` (`search`), one
candidate at a time on the lab's trial loop (`trial`), run on the real machine by `run`, answered by
`result` and `report`. Modules are imported directly; nothing is re-exported here."""
