"""Memory planning: what llama-server b11434 allocates per device for given settings, before launch.

Modules, in the order the planner runs them: `gguf_reader` (header -> `gguf_meta.GGUFMeta`, with
`hparams`: each architecture's cache layout),
`devices` (telemetry + `--rpc` -> the offload devices, llama.cpp's order and names), `resolve`
(settings -> the numbers llama.cpp uses), `weights`, `kv` and `compute` (one component each;
`graph` is compute's structural model, `errorband` its measured error band),
`accounting` (one pass over all of them), `fit` (the `--fit` emulation) and `plan` (the entry point).
`reconcile` compares a plan with the server's own memory report. Exact mode (`exact`, with
`dryrun`, `breakdown`, `fitchoice`, `measured`, `sparse`, `standin`; `exact_runner` for UIs,
`exact_check` for doctor; `hostweights`: the host's mapped and repacked weights from llama.cpp's
placement) fills the same Plan from llama.cpp's own dry run. The calibrated estimate: `calibrate` runs
llama.cpp's dry runs at `calibration.DESIGN` on one model and fits its compute terms (`calibration`),
which `compute` places per device (`calibrated_compute`) for every later plan of that model.
"""
