"""Demo mode and the generated test models.

tiny_model  deterministic tiny Qwen3.5-style GGUFs with an MTP head (`PRESETS`, `write_tiny_model`)
vocab       their byte-level BPE vocabulary and chat template
prepare     demo mode: a generated model, a provisioned CPU server and a simulated GPU profile
"""
