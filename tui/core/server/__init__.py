"""Running and talking to llama-server: processes, readiness, events, history, the handles."""
