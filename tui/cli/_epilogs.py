"""The examples at the end of each command's `--help` (argparse's epilog), by command name.

Why one table apart from the command modules: the examples are read together (one style, the same
model names and flags from one command to the next), `build_parser` attaches them without importing
any other command, and a test runs every example line through the real parser, so an example that
stops parsing fails the suite. Lines are indented, so the help formatter keeps them as written.
"""

from __future__ import annotations

#: the top-level `mtp-tune --help`
TOP = """\
examples:
  # the demo: a generated tiny MTP model on a CPU llama-server, a simulated 6 GB laptop GPU
  mtp-tune --demo
  # the TUI with your model and flags in the form
  mtp-tune -m model.gguf -c 32768 --spec-type draft-mtp -ctkd q8_0
  # will it fit? the memory plan per device, before launching anything
  mtp-tune plan -m model.gguf -c 32768 --spec-type draft-mtp --gpus rtx3060-laptop-6g

`mtp-tune COMMAND --help` shows each command's options and examples."""

EPILOGS: dict[str, str] = {
    "ab": """\
examples:
  # two llama.cpp builds, the same flags: is the new one faster?
  mtp-tune ab base base --a-bin ~/llama-old/llama-server --b-bin ~/llama-new/llama-server -m model.gguf -c 8192
  # one change: q8_0 K/V against the flags as given, 5 passes each, for 12k-token prompts
  mtp-tune ab base "+-ctk q8_0 -ctv q8_0" -m model.gguf -c 32768 --passes 5 --workload 12k:800
  # a saved profile against a section of a preset file, as JSON
  mtp-tune ab mtp32k presets.ini:fast --json
  # a pasted command against the same with MTP on
  mtp-tune ab "llama-server -m model.gguf -c 8192" "llama-server -m model.gguf -c 8192 --spec-type draft-mtp\"""",
    "app": """\
examples:
  # the demo (also what a first `mtp-tune` with no model opens)
  mtp-tune app --demo
  # a local model, its flags in the form, planned against a simulated RTX 3090
  mtp-tune -m model.gguf -c 65536 -ctk q8_0 -ctv q8_0 --gpus rtx3090-24g
  # a model on the Hugging Face Hub, planned before download
  mtp-tune -hf unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M --spec-type draft-mtp
  # watch and probe a server you started yourself
  mtp-tune --attach http://127.0.0.1:8080""",
    "demo-model": """\
examples:
  # the demo's model: every draft accepted
  mtp-tune demo-model --out tiny.gguf
  # a model whose MTP head agrees half the time
  mtp-tune demo-model --out half.gguf --mtp-agree 0.5
  # a mixture-of-experts model without MTP layers, as q8_0
  mtp-tune demo-model --out moe.gguf --arch qwen35moe --no-mtp --dtype q8_0""",
    "doctor": """\
examples:
  # what is installed and what would change results silently
  mtp-tune doctor
  # the same, built first when no llama-server is found
  mtp-tune doctor --build
  # a server of your own
  mtp-tune doctor --server-bin ~/llama.cpp/build/bin/llama-server --json""",
    "gpus": """\
examples:
  # the GPUs of this machine and every process on them (NVML)
  mtp-tune gpus
  # a simulated card, with 4 GiB already taken by a server
  mtp-tune gpus --simulate rtx3060-laptop-6g --alloc 0=4096
  # one JSON line per second until Ctrl-C
  mtp-tune gpus --watch --json --interval 1""",
    "plan": """\
examples:
  # a local model with MTP on, on a simulated 6 GB laptop GPU
  mtp-tune plan -m model.gguf -c 32768 --spec-type draft-mtp --gpus rtx3060-laptop-6g
  # a Hub model before download (its GGUF header only), on two 16 GiB cards
  mtp-tune plan -hf unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M -c 100000 --gpus 2x16GiB
  # llama.cpp's own dry run instead of the estimate, as JSON
  mtp-tune plan -m model.gguf -c 32768 -ctk q8_0 -ctv q8_0 --exact --json""",
    "quality": """\
examples:
  # what q8_0 and q4_0 K/V cost against f16, on your workload, at your context
  mtp-tune quality -m model.gguf -c 4096 -fa on
  # K and V apart, on your own text, two chunks
  mtp-tune quality -m model.gguf --kv q8_0,q8_0/q4_0,q8_0/q5_0 --text notes.txt -c 2048 --chunks 2
  # a weight quant against a higher quant of the same model, as JSON
  mtp-tune quality -m model-Q4_K_M.gguf --ref model-Q8_0.gguf --json
  # does MTP change the greedy output? the task prompts with MTP on and off, token for token
  mtp-tune quality --mtp -m model.gguf --spec-type draft-mtp -c 4096""",
    "probe": """\
examples:
  # launch the model, measure PP, TG and acceptance, stop it
  mtp-tune probe -m model.gguf -c 8192 --spec-type draft-mtp -t 8
  # the same with MTP off, labelled, to compare in `mtp-tune runs`
  mtp-tune probe -m model.gguf -c 8192 -t 8 --label mtp-off
  # a server that is already running, with the long prompt too
  mtp-tune probe --url http://127.0.0.1:8080 --suite full --repeat 5""",
    "profile": """\
examples:
  # save a pasted llama-server command as a profile
  mtp-tune profile import --command "llama-server -m model.gguf -c 32768 --spec-type draft-mtp" --name mtp32k
  # check a --models-preset file the way llama-server reads it
  mtp-tune profile check presets.ini
  # write a profile as a section of that file
  mtp-tune profile export mtp32k --ini presets.ini""",
    "runs": """\
examples:
  # the stored probe runs, newest first
  mtp-tune runs list
  # run 12 against its MTP on/off counterpart, for 12000-token prompts and 800-token answers
  mtp-tune runs compare 12 --mtp-pair --workload 12000,800
  # a Markdown table of three runs
  mtp-tune runs export 12 13 14 --format md""",
    "serve": """\
examples:
  # run a model under the supervisor until Ctrl-C
  mtp-tune serve -m model.gguf -c 32768 --spec-type draft-mtp -ngl 99
  # let llama-server download it, with progress on stderr
  mtp-tune serve -hf unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M --port 8080
  # router mode, one section of a preset file
  mtp-tune serve --models-preset presets.ini --router-model mtp32k""",
    "sweep": """\
examples:
  # MTP on and off at two micro-batch sizes
  mtp-tune sweep -m model.gguf -c 16384 --axis mtp=on,off --axis ub=256,512
  # the draft KV type and length, best by end-to-end time of 2000-in/500-out requests
  mtp-tune sweep -m model.gguf --spec-type draft-mtp --axis ctkd=f16,q8_0 --axis spec-draft-n-max=2,3,4 --objective workload:2000,500
  # planned against a simulated GPU, the best saved as a profile
  mtp-tune sweep -m model.gguf --axis ub=128,256,512 --simulate rtx3060-laptop-6g --save-best fastest""",
    "tune": """\
examples:
  # the best configuration for chat-like requests, in 30 minutes at most, saved as a profile
  mtp-tune tune -m model.gguf -c 32768 --workload tasks --budget 30m --save-best tuned
  # one request shape, for a Hub model tuned from its header before download
  mtp-tune tune -hf unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M --workload 2000:500 --report tune.md
  # a GPU you do not have: stand-ins capped at its memory make its OOMs real
  mtp-tune tune -m model.gguf --gpus rtx3060-laptop-6g --stand-ins --workload 64:32
  # the quants in a folder and the KV types within a KL divergence of 0.05, measured first
  mtp-tune tune -m quants/ --workload tasks --max-kld 0.05 --budget 30m""",
    "variants": """\
examples:
  # which quant of a repo fits two 16 GB cards at a 100k context, MTP on
  mtp-tune variants unsloth/Qwen3.6-35B-A3B-GGUF --gpus 2xv100-16g -c 100000 --spec-type draft-mtp
  # each quant with three KV types, as a Markdown table
  mtp-tune variants unsloth/Qwen3.6-35B-A3B-GGUF --kv f16,q8_0,q4_0 --md
  # one quant, measured by llama.cpp's own dry run
  mtp-tune variants unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M --exact""",
}
