"""Running and talking to llama-server, split by concern.

process      children that never outlive mtp-tune: spawn (own group, parent-death signal, from the
             long-lived spawner thread), the live registry, stop_all/install_cleanup, free_port,
             the one environment sanitiser `child_env`, output pumping, `kill_group`, `Child`
launch       one start as data (`Launch`), the argv a launch runs, why a spawn failed
events       ServerState, StateEvent, LogLine, EventHub and the log/listener core both handles share
readiness    the one /health and router /models poller (supervisor watcher and attachment alike)
history      launch log files and the one launch-history writer
supervisor   Supervisor: the server mtp-tune runs, from the Settings it carries (argv built at spawn)
launch_threads  the reader and watcher threads of each launch and what they decide
keyfile      the API key in a 0600 --api-key-file, removed on stop and by its reaper if mtp-tune dies
attach       Attachment: a server mtp-tune only watches
handle       ServerHandle (the typed interface of both) and RunningSettings (what a server runs with)
preset_check the real router's verdict on a --models-preset file
client       the async HTTP client (and the pollers' sync client); metrics: /metrics as data
client_errors  every way a request can end other than an answer (ClientError and its kinds)
replies      what the server answers (Health, CompletionResult) and the SSE/text readers
failures     Failure and the endings the supervisor decides; classify: a log read into a Failure
oom          an out-of-memory ending (device or host, what was allocated); model_failures: a model
             that cannot be loaded (missing, not a GGUF, truncated, unknown architecture)
memreport    the memory lines of a launch log as data
binary       what an installed llama-server is and accepts (`--version`, one cached `--help`)
provision    finding or building the llama-server binary
"""
