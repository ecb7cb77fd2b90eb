"""Where mtp-tune keeps its files and how it is configured.

paths   the cache, config and data directories (XDG, overridable by environment)
text    text from outside (a Hub file name, a server's body) made safe to show: one rule, CLI and TUI
jsonshape  JSON read back from a local file checked against the shape its writer gave it
"""
