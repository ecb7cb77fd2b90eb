"""A fake llama-server that never answers HTTP (ready-timeout tests). Ignores SIGTERM with --stubborn."""

from __future__ import annotations

import signal
import sys
import threading

if "--stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("I srv  llama_server: initializing ...", flush=True)
print("I srv    load_model: loading model 'slow.gguf'", flush=True)
threading.Event().wait(300)
