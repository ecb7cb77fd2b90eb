"""A fake server that starts a grandchild holding its stdout open, prints the grandchild's pid, and
exits with code 3: the supervisor must notice the exit without EOF and kill the straggler."""

from __future__ import annotations

import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(f"E grandchild {child.pid}", flush=True)
sys.exit(3)
