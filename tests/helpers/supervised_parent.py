"""A stand-in for mtp-tune in the orphan tests: a separate process that supervises a real server.

Usage: python -m tests.helpers.supervised_parent MODE SERVER_BIN LOG_DIR [llama-server args...]
Prints "<state> <server pid> <server executable name>" once the server is ready, then, by MODE: `wait` (until killed),
`exit` (returns normally, so only the atexit hook stops the server, once its standard input closes or gives a
line: the test reads what it needs of the running server first; exiting right after the print let the server go
before the test could read its /proc entry, a race CI lost once).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from tui.core.options.argv import settings_from_argv
from tui.core.server.supervisor import Supervisor


def main() -> int:
    mode, binary, log_dir, *args = sys.argv[1:]
    sup = Supervisor(binary, settings_from_argv(args).settings, log_dir=log_dir, ready_timeout=60)
    # Start from a short-lived thread, as a UI worker would: the server must outlive that thread.
    t = threading.Thread(target=sup.start)
    t.start()
    t.join()
    state = sup.wait_ready(60)
    exe = Path(f"/proc/{sup.pid}/exe").resolve().name if sup.pid else "?"
    print(f"{state.value} {sup.pid} {exe}", flush=True)
    if mode == "exit":
        sys.stdin.readline()  # the test says when (a line, or EOF when it closes the pipe or dies)
        return 0
    threading.Event().wait(300)  # the test kills this process long before
    return 0


if __name__ == "__main__":
    sys.exit(main())
