"""`mtp-tune doctor`: the top layer of tui.core, because it checks every other one.

report   what was found (server, capabilities, exact mode, GPUs, free RAM) and what will silently
         change results (llama.cpp config files, LLAMA_ARG_* variables)

It sits above `server`, `gpu` and `planning` (exact mode is checked with a real dry run), so no
other subpackage imports it.
"""
