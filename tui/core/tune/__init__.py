"""The tune behind `mtp-tune tune`: an MTP-aware search of a `space` for a `workload` (`search`), one
candidate at a time on the lab's trial loop (`trial`) over a `machine`, run on the real one by `run`,
answered and reported by `result`. Modules are imported directly; nothing is re-exported here."""

#: The lowest KV cache types a tune may choose unless told (`space.Floors`; the CLI's and the TUI's
#: defaults, here because both read them before the tune's heavier modules load).
DEFAULT_KV_FLOOR = "q8_0"
DEFAULT_DRAFT_KV_FLOOR = "q4_0"
