"""The prepared real-GPU check (issue 15): build llama.cpp with CUDA, measure the product's GPU paths
on a real NVIDIA card in two short device calls, and a CPU-only `--dry-run` on recorded samples.

Layout: `cli` (entry, steps), `budget` (the clock every step is bounded by), `matrix` (the configs),
`nvsmi` (nvidia-smi CSV), `build` (the CUDA build), `backend` (real and recorded launches),
`assemble` (JSON/Markdown), `adapter` (the only imports of tui.core).
"""
