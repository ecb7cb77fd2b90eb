"""Run a program with an address-space limit (MiB): reproduces host out-of-memory for real.

Usage: python rlimit_exec.py LIMIT_MIB PROGRAM [ARGS...]
"""

from __future__ import annotations

import os
import resource
import sys

limit = int(sys.argv[1]) * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
os.execv(sys.argv[2], sys.argv[2:])
