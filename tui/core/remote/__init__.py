"""Models that are not on this disk: planned from their GGUF header alone, read by HTTP ranges.

`source` (which remote model the flags name), `hub` (llama.cpp's own `-hf` resolution rules, and a
repo's variants), `hub_client` (the Hub's API, bounded), `ranged` and `header`
(the header by range requests, nothing past it), `cache` (headers and listings on disk, so a
second plan asks nothing), `fetch` (the entry point: a local header-only copy to plan), `variants`
(every quant of a repo planned side by side).
"""

import os

# A planner sends no telemetry, and a second plan no request at all: huggingface_hub (2.4) asks
# {ENDPOINT}/api/agent-harnesses while building its user-agent unless telemetry is off. Its
# constants read this when it is first imported, and only this package imports it.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
