"""Every llama-server (b11434) option mtp-tune knows: spellings, env names, value or flag, and removals.

Why a table: the argv importer, the preset parser and validation must agree with the real server on
which spellings exist. `SERVER_OPTIONS` was dumped from b11434's own option registry
(`common_params_parser_init(LLAMA_EXAMPLE_SERVER)` plus the preset-only keys), so it is exact for that
build; an installed server can be checked against its `--help` with `server_options.parse_help`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

__all__ = [
    "FALSEY",
    "FIELDS",
    "FIELD_BY_NAME",
    "FieldSpec",
    "REMOVED",
    "REMOVED_ENV",
    "REPEATABLE",
    "RemovedOption",
    "SERVER_OPTIONS",
    "ServerOption",
    "TABLE_BUILD",
    "TRUTHY",
    "all_ini_keys",
    "all_spellings",
    "describe_removed",
    "field_for_option",
    "find_option",
    "find_removed",
    "is_falsey",
    "is_truthy",
    "normalize_spelling",
    "option_for_ini_key",
]

#: The llama.cpp build the table was taken from.
TABLE_BUILD = "b11434"

TRUTHY: frozenset[str] = frozenset({"on", "enabled", "true", "1"})
FALSEY: frozenset[str] = frozenset({"off", "disabled", "false", "0"})


def is_truthy(value: str) -> bool:
    """llama-server's `is_truthy` (case-sensitive, arg.cpp:1337)."""
    return value in TRUTHY


def is_falsey(value: str) -> bool:
    """llama-server's `is_falsey` (case-sensitive)."""
    return value in FALSEY


@dataclass(frozen=True)
class ServerOption:
    """One option as registered in llama-server.

    `kind` is the C++ handler type: `void` (flag), `bool` (flag with negative spellings), `int`,
    `string`, `strstr` (two values). `preset_only` keys exist only in `--models-preset` files.
    """

    args: tuple[str, ...]
    neg: tuple[str, ...] = ()
    hint: str | None = None
    env: str | None = None
    kind: str = "string"
    preset_only: bool = False

    @property
    def repeatable(self) -> bool:
        """True when every occurrence counts (the handler appends); otherwise the last one wins."""
        return self.canonical in REPEATABLE

    @property
    def takes_value(self) -> bool:
        return self.hint is not None

    @property
    def canonical(self) -> str:
        """The first long (`--`) spelling; the name mtp-tune writes."""
        return next((a for a in self.args if a.startswith("--")), self.args[-1])

    @property
    def canonical_neg(self) -> str | None:
        return next((a for a in self.neg if a.startswith("--")), self.neg[-1] if self.neg else None)

    @property
    def spellings(self) -> tuple[str, ...]:
        return self.args + self.neg

    @property
    def env_names(self) -> tuple[str, ...]:
        """Env names, including the `LLAMA_ARG_NO_*` twin of options with a negative form."""
        if not self.env:
            return ()
        if self.neg:
            return (self.env, self.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_"))
        return (self.env,)

    @property
    def ini_key(self) -> str:
        """The key mtp-tune writes into a preset section."""
        return self.canonical.lstrip("-")

    @property
    def ini_keys(self) -> tuple[str, ...]:
        """Every key the preset parser maps to this option (preset.cpp:251-262)."""
        return tuple(s.lstrip("-") for s in self.spellings) + self.env_names

    def is_negative(self, spelling: str) -> bool:
        """True when `spelling` (with or without dashes) is one of the negative forms."""
        bare = spelling.lstrip("-")
        return any(n.lstrip("-") == bare for n in self.neg)


def _o(
    args: tuple[str, ...],
    neg: tuple[str, ...],
    hint: str | None,
    env: str | None,
    kind: str,
    preset_only: bool = False,
) -> ServerOption:
    return ServerOption(args, neg, hint, env, kind, preset_only)


# fmt: off
#: Every option llama-server b11434 registers, in registration order (generated; do not hand-edit
#: spellings). Removed options that still exist only to throw are included: see `REMOVED`.
SERVER_OPTIONS: tuple[ServerOption, ...] = (
    _o(('-h', '--help', '--usage'), (), None, None, 'void'),
    _o(('--version',), (), None, None, 'void'),
    _o(('-cl', '--cache-list'), (), None, None, 'void'),
    _o(('--completion-bash',), (), None, None, 'void'),
    _o(('-t', '--threads'), (), 'N', 'LLAMA_ARG_THREADS', 'int'),
    _o(('-tb', '--threads-batch'), (), 'N', None, 'int'),
    _o(('-C', '--cpu-mask'), (), 'M', None, 'string'),
    _o(('-Cr', '--cpu-range'), (), 'lo-hi', None, 'string'),
    _o(('--cpu-strict',), (), '<0|1>', None, 'string'),
    _o(('--prio',), (), 'N', None, 'int'),
    _o(('--poll',), (), '<0...100>', None, 'string'),
    _o(('-Cb', '--cpu-mask-batch'), (), 'M', None, 'string'),
    _o(('-Crb', '--cpu-range-batch'), (), 'lo-hi', None, 'string'),
    _o(('--cpu-strict-batch',), (), '<0|1>', None, 'int'),
    _o(('--prio-batch',), (), 'N', None, 'int'),
    _o(('--poll-batch',), (), '<0|1>', None, 'int'),
    _o(('-lcs', '--lookup-cache-static'), (), 'FNAME', None, 'string'),
    _o(('-lcd', '--lookup-cache-dynamic'), (), 'FNAME', None, 'string'),
    _o(('-c', '--ctx-size'), (), 'N', 'LLAMA_ARG_CTX_SIZE', 'int'),
    _o(('--kv-unified-per-slot',), (), 'N', 'LLAMA_ARG_KV_UNIFIED_PER_SLOT', 'int'),
    _o(('-n', '--predict', '--n-predict'), (), 'N', 'LLAMA_ARG_N_PREDICT', 'int'),
    _o(('-b', '--batch-size'), (), 'N', 'LLAMA_ARG_BATCH', 'int'),
    _o(('-ub', '--ubatch-size'), (), 'N', 'LLAMA_ARG_UBATCH', 'int'),
    _o(('--keep',), (), 'N', None, 'int'),
    _o(('--swa-full',), (), None, 'LLAMA_ARG_SWA_FULL', 'void'),
    _o(('-ctxcp', '--ctx-checkpoints', '--swa-checkpoints'), (), 'N', 'LLAMA_ARG_CTX_CHECKPOINTS', 'int'),
    _o(('-cms', '--checkpoint-min-step'), (), 'N', 'LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT', 'int'),
    _o(('-cram', '--cache-ram'), (), 'N', 'LLAMA_ARG_CACHE_RAM', 'int'),
    _o(('-kvu', '--kv-unified'), ('-no-kvu', '--no-kv-unified'), None, 'LLAMA_ARG_KV_UNIFIED', 'bool'),
    _o(('--cache-idle-slots',), ('--no-cache-idle-slots',), None, 'LLAMA_ARG_CACHE_IDLE_SLOTS', 'bool'),
    _o(('--context-shift',), ('--no-context-shift',), None, 'LLAMA_ARG_CONTEXT_SHIFT', 'bool'),
    _o(('-fa', '--flash-attn'), (), '[on|off|auto]', 'LLAMA_ARG_FLASH_ATTN', 'string'),
    _o(('--perf',), ('--no-perf',), None, 'LLAMA_ARG_PERF', 'bool'),
    _o(('-e', '--escape'), ('--no-escape',), None, None, 'bool'),
    _o(('-r', '--reverse-prompt'), (), 'PROMPT', None, 'string'),
    _o(('-sp', '--special'), (), None, None, 'void'),
    _o(('--warmup',), ('--no-warmup',), None, None, 'bool'),
    _o(('--spm-infill',), (), None, None, 'void'),
    _o(('--samplers',), (), 'SAMPLERS', None, 'string'),
    _o(('-s', '--seed'), (), 'SEED', None, 'string'),
    _o(('--sampler-seq', '--sampling-seq'), (), 'SEQUENCE', None, 'string'),
    _o(('--ignore-eos',), (), None, None, 'void'),
    _o(('--temp', '--temperature'), (), 'N', 'LLAMA_ARG_TEMPERATURE', 'string'),
    _o(('--top-k',), (), 'N', 'LLAMA_ARG_TOP_K', 'int'),
    _o(('--top-p',), (), 'N', 'LLAMA_ARG_TOP_P', 'string'),
    _o(('--min-p',), (), 'N', 'LLAMA_ARG_MIN_P', 'string'),
    _o(('--top-nsigma', '--top-n-sigma'), (), 'N', None, 'string'),
    _o(('--xtc-probability',), (), 'N', None, 'string'),
    _o(('--xtc-threshold',), (), 'N', None, 'string'),
    _o(('--typical', '--typical-p'), (), 'N', None, 'string'),
    _o(('--repeat-last-n',), (), 'N', None, 'int'),
    _o(('--repeat-penalty',), (), 'N', 'LLAMA_ARG_REPEAT_PENALTY', 'string'),
    _o(('--presence-penalty',), (), 'N', 'LLAMA_ARG_PRESENCE_PENALTY', 'string'),
    _o(('--frequency-penalty',), (), 'N', 'LLAMA_ARG_FREQUENCY_PENALTY', 'string'),
    _o(('--dry-multiplier',), (), 'N', None, 'string'),
    _o(('--dry-base',), (), 'N', None, 'string'),
    _o(('--dry-allowed-length',), (), 'N', None, 'int'),
    _o(('--dry-penalty-last-n',), (), 'N', None, 'int'),
    _o(('--dry-sequence-breaker',), (), 'STRING', None, 'string'),
    _o(('--adaptive-target',), (), 'N', None, 'string'),
    _o(('--adaptive-decay',), (), 'N', None, 'string'),
    _o(('--dynatemp-range',), (), 'N', None, 'string'),
    _o(('--dynatemp-exp',), (), 'N', None, 'string'),
    _o(('--mirostat',), (), 'N', None, 'int'),
    _o(('--mirostat-lr',), (), 'N', None, 'string'),
    _o(('--mirostat-ent',), (), 'N', None, 'string'),
    _o(('-l', '--logit-bias'), (), 'TOKEN_ID(+/-)BIAS', None, 'string'),
    _o(('--grammar',), (), 'GRAMMAR', None, 'string'),
    _o(('--grammar-file',), (), 'FNAME', None, 'string'),
    _o(('-j', '--json-schema'), (), 'SCHEMA', None, 'string'),
    _o(('-jf', '--json-schema-file'), (), 'FILE', None, 'string'),
    _o(('-bs', '--backend-sampling'), (), None, 'LLAMA_ARG_BACKEND_SAMPLING', 'void'),
    _o(('--pooling',), (), '{none,mean,cls,last,rank}', 'LLAMA_ARG_POOLING', 'string'),
    _o(('--rope-scaling',), (), '{none,linear,yarn}', 'LLAMA_ARG_ROPE_SCALING_TYPE', 'string'),
    _o(('--rope-scale',), (), 'N', 'LLAMA_ARG_ROPE_SCALE', 'string'),
    _o(('--rope-freq-base',), (), 'N', 'LLAMA_ARG_ROPE_FREQ_BASE', 'string'),
    _o(('--rope-freq-scale',), (), 'N', 'LLAMA_ARG_ROPE_FREQ_SCALE', 'string'),
    _o(('--yarn-orig-ctx',), (), 'N', 'LLAMA_ARG_YARN_ORIG_CTX', 'int'),
    _o(('--yarn-ext-factor',), (), 'N', 'LLAMA_ARG_YARN_EXT_FACTOR', 'string'),
    _o(('--yarn-attn-factor',), (), 'N', 'LLAMA_ARG_YARN_ATTN_FACTOR', 'string'),
    _o(('--yarn-beta-slow',), (), 'N', 'LLAMA_ARG_YARN_BETA_SLOW', 'string'),
    _o(('--yarn-beta-fast',), (), 'N', 'LLAMA_ARG_YARN_BETA_FAST', 'string'),
    _o(('-kvo', '--kv-offload'), ('-nkvo', '--no-kv-offload'), None, 'LLAMA_ARG_KV_OFFLOAD', 'bool'),
    _o(('--repack',), ('-nr', '--no-repack'), None, 'LLAMA_ARG_REPACK', 'bool'),
    _o(('--no-host',), (), None, 'LLAMA_ARG_NO_HOST', 'void'),
    _o(('-ctk', '--cache-type-k'), (), 'TYPE', 'LLAMA_ARG_CACHE_TYPE_K', 'string'),
    _o(('-ctv', '--cache-type-v'), (), 'TYPE', 'LLAMA_ARG_CACHE_TYPE_V', 'string'),
    _o(('-dt', '--defrag-thold'), (), 'N', 'LLAMA_ARG_DEFRAG_THOLD', 'string'),
    _o(('-np', '--parallel'), (), 'N', 'LLAMA_ARG_N_PARALLEL', 'int'),
    _o(('-cb', '--cont-batching'), ('-nocb', '--no-cont-batching'), None, 'LLAMA_ARG_CONT_BATCHING', 'bool'),
    _o(('-mm', '--mmproj'), (), 'FILE', 'LLAMA_ARG_MMPROJ', 'string'),
    _o(('-mmu', '--mmproj-url'), (), 'URL', 'LLAMA_ARG_MMPROJ_URL', 'string'),
    _o(('--mmproj-auto',), ('--no-mmproj', '--no-mmproj-auto'), None, 'LLAMA_ARG_MMPROJ_AUTO', 'bool'),
    _o(('--mmproj-offload',), ('--no-mmproj-offload',), None, 'LLAMA_ARG_MMPROJ_OFFLOAD', 'bool'),
    _o(('-mmdev', '--mmproj-device'), (), 'DEVICE', 'MTMD_BACKEND_DEVICE', 'string'),
    _o(('--image-min-tokens',), (), 'N', 'LLAMA_ARG_IMAGE_MIN_TOKENS', 'int'),
    _o(('--image-max-tokens',), (), 'N', 'LLAMA_ARG_IMAGE_MAX_TOKENS', 'int'),
    _o(('--mtmd-batch-max-tokens',), (), 'N', 'LLAMA_ARG_MTMD_BATCH_MAX_TOKENS', 'int'),
    _o(('--video-fps',), (), 'N', 'LLAMA_ARG_VIDEO_FPS', 'string'),
    _o(('--video-timestamp-interval',), (), 'N', 'LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL', 'int'),
    _o(('--video-ffmpeg-dir',), (), 'DIR', 'LLAMA_ARG_VIDEO_FFMPEG_DIR', 'string'),
    _o(('--rpc',), (), 'SERVERS', 'LLAMA_ARG_RPC', 'string'),
    _o(('-lm', '--load-mode'), (), 'MODE', 'LLAMA_ARG_LOAD_MODE', 'string'),
    _o(('-lzm', '--lazy-mode'), (), 'MODE', 'LLAMA_ARG_LAZY_MODE', 'string'),
    _o(('--numa',), (), 'TYPE', 'LLAMA_ARG_NUMA', 'string'),
    _o(('-dev', '--device'), (), '<dev1,dev2,..>', 'LLAMA_ARG_DEVICE', 'string'),
    _o(('--list-devices',), (), None, None, 'void'),
    _o(
        ('-ot', '--override-tensor'),
        (),
        '<tensor name pattern>=<buffer type>,...',
        'LLAMA_ARG_OVERRIDE_TENSOR',
        'string',
    ),
    _o(('-cmoe', '--cpu-moe'), (), None, 'LLAMA_ARG_CPU_MOE', 'void'),
    _o(('-ncmoe', '--n-cpu-moe'), (), 'N', 'LLAMA_ARG_N_CPU_MOE', 'int'),
    _o(('-ncffn', '--n-cpu-ffn'), (), 'N', 'LLAMA_ARG_N_CPU_FFN', 'int'),
    _o(('-ngl', '--gpu-layers', '--n-gpu-layers'), (), 'N', 'LLAMA_ARG_N_GPU_LAYERS', 'string'),
    _o(('-sm', '--split-mode'), (), '{none,layer,row,tensor}', 'LLAMA_ARG_SPLIT_MODE', 'string'),
    _o(('-ts', '--tensor-split'), (), 'N0,N1,N2,...', 'LLAMA_ARG_TENSOR_SPLIT', 'string'),
    _o(('-mg', '--main-gpu'), (), 'INDEX', 'LLAMA_ARG_MAIN_GPU', 'int'),
    _o(('-fit', '--fit'), (), '[on|off]', 'LLAMA_ARG_FIT', 'string'),
    _o(('-fitt', '--fit-target'), (), 'MiB0,MiB1,MiB2,...', 'LLAMA_ARG_FIT_TARGET', 'string'),
    _o(('-fitc', '--fit-ctx'), (), 'N', 'LLAMA_ARG_FIT_CTX', 'int'),
    _o(('--check-tensors',), (), None, None, 'void'),
    _o(('--override-kv',), (), 'KEY=TYPE:VALUE,...', None, 'string'),
    _o(('--op-offload',), ('--no-op-offload',), None, None, 'bool'),
    _o(('--lora',), (), 'FNAME', None, 'string'),
    _o(('--lora-scaled',), (), 'FNAME:SCALE,...', None, 'string'),
    _o(('--control-vector',), (), 'FNAME', None, 'string'),
    _o(('--control-vector-scaled',), (), 'FNAME:SCALE,...', None, 'string'),
    _o(('--control-vector-layer-range',), (), 'START', None, 'strstr'),
    _o(('-a', '--alias'), (), 'STRING', 'LLAMA_ARG_ALIAS', 'string'),
    _o(('--tags',), (), 'STRING', 'LLAMA_ARG_TAGS', 'string'),
    _o(('-m', '--model'), (), 'FNAME', 'LLAMA_ARG_MODEL', 'string'),
    _o(('-mu', '--model-url'), (), 'MODEL_URL', 'LLAMA_ARG_MODEL_URL', 'string'),
    _o(('-dr', '--docker-repo'), (), '[<repo>/]<model>[:quant]', 'LLAMA_ARG_DOCKER_REPO', 'string'),
    _o(('-hf', '-hfr', '--hf-repo'), (), '<user>/<model>[:quant]', 'LLAMA_ARG_HF_REPO', 'string'),
    _o(('-hff', '--hf-file'), (), 'FILE', 'LLAMA_ARG_HF_FILE', 'string'),
    _o(('-hft', '--hf-token'), (), 'TOKEN', 'HF_TOKEN', 'string'),
    _o(('--embd-normalize',), (), 'N', None, 'int'),
    _o(('--host',), (), 'HOST', 'LLAMA_ARG_HOST', 'string'),
    _o(('--port',), (), 'PORT', 'LLAMA_ARG_PORT', 'int'),
    _o(('--reuse-port',), (), None, 'LLAMA_ARG_REUSE_PORT', 'void'),
    _o(('--path',), (), 'PATH', 'LLAMA_ARG_STATIC_PATH', 'string'),
    _o(('--cors-origins',), (), 'ORIGINS', 'LLAMA_ARG_CORS_ORIGINS', 'string'),
    _o(('--cors-methods',), (), 'METHODS', 'LLAMA_ARG_CORS_METHODS', 'string'),
    _o(('--cors-headers',), (), 'HEADERS', 'LLAMA_ARG_CORS_HEADERS', 'string'),
    _o(('--cors-credentials',), ('--no-cors-credentials',), None, 'LLAMA_ARG_CORS_CREDENTIALS', 'bool'),
    _o(('--api-prefix',), (), 'PREFIX', 'LLAMA_ARG_API_PREFIX', 'string'),
    _o(('--ui-config', '--webui-config'), (), 'JSON', 'LLAMA_ARG_UI_CONFIG', 'string'),
    _o(('--ui-config-file', '--webui-config-file'), (), 'PATH', 'LLAMA_ARG_UI_CONFIG_FILE', 'string'),
    _o(
        ('--ui-mcp-proxy', '--webui-mcp-proxy'),
        ('--no-ui-mcp-proxy', '--no-webui-mcp-proxy'),
        None,
        'LLAMA_ARG_UI_MCP_PROXY',
        'bool',
    ),
    _o(('--tools',), (), 'TOOL1,TOOL2,...', 'LLAMA_ARG_TOOLS', 'string'),
    _o(('--tools-runtime',), (), 'OPTION', 'LLAMA_ARG_TOOLS_RUNTIME', 'string'),
    _o(('--mcp-servers-config',), (), 'PATH', 'LLAMA_ARG_MCP_SERVERS_CONFIG', 'string'),
    _o(('--mcp-servers-json',), (), 'JSON', 'LLAMA_ARG_MCP_SERVERS_JSON', 'string'),
    _o(('-ag', '--agent'), ('-no-ag', '--no-agent'), None, 'LLAMA_ARG_AGENT', 'bool'),
    _o(('--ui', '--webui'), ('--no-ui', '--no-webui'), None, 'LLAMA_ARG_UI', 'bool'),
    _o(('--embedding', '--embeddings'), (), None, 'LLAMA_ARG_EMBEDDINGS', 'void'),
    _o(('--rerank', '--reranking'), (), None, 'LLAMA_ARG_RERANKING', 'void'),
    _o(('--api-key',), (), 'KEY', 'LLAMA_API_KEY', 'string'),
    _o(('--api-key-file',), (), 'FNAME', 'LLAMA_ARG_API_KEY_FILE', 'string'),
    _o(('--ssl-key-file',), (), 'FNAME', 'LLAMA_ARG_SSL_KEY_FILE', 'string'),
    _o(('--ssl-cert-file',), (), 'FNAME', 'LLAMA_ARG_SSL_CERT_FILE', 'string'),
    _o(('--chat-template-kwargs',), (), 'STRING', 'LLAMA_ARG_CHAT_TEMPLATE_KWARGS', 'string'),
    _o(('-to', '--timeout'), (), 'N', 'LLAMA_ARG_TIMEOUT', 'int'),
    _o(('--sse-ping-interval',), (), 'N', 'LLAMA_ARG_SSE_PING_INTERVAL', 'int'),
    _o(('--threads-http',), (), 'N', 'LLAMA_ARG_THREADS_HTTP', 'int'),
    _o(('--cache-prompt',), ('--no-cache-prompt',), None, 'LLAMA_ARG_CACHE_PROMPT', 'bool'),
    _o(('--cache-reuse',), (), 'N', 'LLAMA_ARG_CACHE_REUSE', 'int'),
    _o(('--metrics',), (), None, 'LLAMA_ARG_ENDPOINT_METRICS', 'void'),
    _o(('--props',), (), None, 'LLAMA_ARG_ENDPOINT_PROPS', 'void'),
    _o(('--slots',), ('--no-slots',), None, 'LLAMA_ARG_ENDPOINT_SLOTS', 'bool'),
    _o(('--slot-save-path',), (), 'PATH', None, 'string'),
    _o(('--media-path',), (), 'PATH', None, 'string'),
    _o(('--models-dir',), (), 'PATH', 'LLAMA_ARG_MODELS_DIR', 'string'),
    _o(('--models-preset',), (), 'PATH', 'LLAMA_ARG_MODELS_PRESET', 'string'),
    _o(('--models-max',), (), 'N', 'LLAMA_ARG_MODELS_MAX', 'int'),
    _o(('--models-autoload',), ('--no-models-autoload',), None, 'LLAMA_ARG_MODELS_AUTOLOAD', 'bool'),
    _o(('--jinja',), ('--no-jinja',), None, 'LLAMA_ARG_JINJA', 'bool'),
    _o(('--reasoning-format',), (), 'FORMAT', 'LLAMA_ARG_THINK', 'string'),
    _o(('-rea', '--reasoning'), (), '[on|off|auto]', 'LLAMA_ARG_REASONING', 'string'),
    _o(('--reasoning-effort',), (), 'LEVEL', 'LLAMA_ARG_REASONING_EFFORT', 'string'),
    _o(('--reasoning-budget',), (), 'N', 'LLAMA_ARG_THINK_BUDGET', 'int'),
    _o(('--reasoning-budget-message',), (), 'MESSAGE', 'LLAMA_ARG_THINK_BUDGET_MESSAGE', 'string'),
    _o(('--reasoning-preserve',), ('--no-reasoning-preserve',), None, 'LLAMA_ARG_REASONING_PRESERVE', 'bool'),
    _o(('--chat-template',), (), 'JINJA_TEMPLATE', 'LLAMA_ARG_CHAT_TEMPLATE', 'string'),
    _o(('--chat-template-file',), (), 'JINJA_TEMPLATE_FILE', 'LLAMA_ARG_CHAT_TEMPLATE_FILE', 'string'),
    _o(('--skip-chat-parsing',), ('--no-skip-chat-parsing',), None, 'LLAMA_ARG_SKIP_CHAT_PARSING', 'bool'),
    _o(('--prefill-assistant',), ('--no-prefill-assistant',), None, 'LLAMA_ARG_PREFILL_ASSISTANT', 'bool'),
    _o(('-sps', '--slot-prompt-similarity'), (), 'SIMILARITY', None, 'string'),
    _o(('--lora-init-without-apply',), (), None, None, 'void'),
    _o(('--sleep-idle-seconds',), (), 'SECONDS', None, 'int'),
    _o(('--log-disable',), (), None, None, 'void'),
    _o(('--log-file',), (), 'FNAME', 'LLAMA_ARG_LOG_FILE', 'string'),
    _o(('--log-jsonl',), ('--no-log-jsonl',), None, 'LLAMA_ARG_LOG_JSONL', 'bool'),
    _o(('--log-prompts-dir',), (), 'PATH', None, 'string'),
    _o(('--log-colors',), (), '[on|off|auto]', 'LLAMA_ARG_LOG_COLORS', 'string'),
    _o(('-v', '--verbose', '--log-verbose'), (), None, None, 'void'),
    _o(('--offline',), (), None, 'LLAMA_ARG_OFFLINE', 'void'),
    _o(('-lv', '--verbosity', '--log-verbosity'), (), 'N', 'LLAMA_ARG_LOG_VERBOSITY', 'int'),
    _o(('--log-prefix',), ('--no-log-prefix',), None, 'LLAMA_ARG_LOG_PREFIX', 'bool'),
    _o(('--log-timestamps',), ('--no-log-timestamps',), None, 'LLAMA_ARG_LOG_TIMESTAMPS', 'bool'),
    _o(
        ('--spec-draft-hf', '-hfd', '-hfrd', '--hf-repo-draft'),
        (),
        '<user>/<model>[:quant]',
        'LLAMA_ARG_SPEC_DRAFT_HF_REPO',
        'string',
    ),
    _o(('--spec-draft-threads', '-td', '--threads-draft'), (), 'N', None, 'int'),
    _o(('--spec-draft-threads-batch', '-tbd', '--threads-batch-draft'), (), 'N', None, 'int'),
    _o(('--spec-draft-cpu-mask', '-Cd', '--cpu-mask-draft'), (), 'M', None, 'string'),
    _o(('--spec-draft-cpu-range', '-Crd', '--cpu-range-draft'), (), 'lo-hi', None, 'string'),
    _o(('--spec-draft-cpu-strict', '--cpu-strict-draft'), (), '<0|1>', None, 'int'),
    _o(('--spec-draft-prio', '--prio-draft'), (), 'N', None, 'int'),
    _o(('--spec-draft-poll', '--poll-draft'), (), '<0|1>', None, 'int'),
    _o(('--spec-draft-cpu-mask-batch', '-Cbd', '--cpu-mask-batch-draft'), (), 'M', None, 'string'),
    _o(('--spec-draft-cpu-strict-batch', '--cpu-strict-batch-draft'), (), '<0|1>', None, 'int'),
    _o(('--spec-draft-prio-batch', '--prio-batch-draft'), (), 'N', None, 'int'),
    _o(('--spec-draft-poll-batch', '--poll-batch-draft'), (), '<0|1>', None, 'int'),
    _o(
        ('--spec-draft-type-k', '-ctkd', '--cache-type-k-draft'),
        (),
        'TYPE',
        'LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K',
        'string',
    ),
    _o(
        ('--spec-draft-type-v', '-ctvd', '--cache-type-v-draft'),
        (),
        'TYPE',
        'LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V',
        'string',
    ),
    _o(
        ('--spec-draft-override-tensor', '-otd', '--override-tensor-draft'),
        (),
        '<tensor name pattern>=<buffer type>,...',
        None,
        'string',
    ),
    _o(
        ('--spec-draft-cpu-moe', '-cmoed', '--cpu-moe-draft'),
        (),
        None,
        'LLAMA_ARG_SPEC_DRAFT_CPU_MOE',
        'void',
    ),
    _o(
        ('--spec-draft-n-cpu-moe', '--spec-draft-ncmoe', '-ncmoed', '--n-cpu-moe-draft'),
        (),
        'N',
        'LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE',
        'int',
    ),
    _o(('--spec-draft-n-max',), (), 'N', 'LLAMA_ARG_SPEC_DRAFT_N_MAX', 'int'),
    _o(('--spec-draft-n-min',), (), 'N', 'LLAMA_ARG_SPEC_DRAFT_N_MIN', 'int'),
    _o(('--spec-synth-len',), (), 'L', 'LLAMA_ARG_SPEC_SYNTH_LEN', 'string'),
    _o(('--spec-synth-rates',), (), 'P0,P1,...', 'LLAMA_ARG_SPEC_SYNTH_RATES', 'string'),
    _o(('--spec-draft-p-split', '--draft-p-split'), (), 'P', 'LLAMA_ARG_SPEC_DRAFT_P_SPLIT', 'string'),
    _o(('--spec-draft-p-min', '--draft-p-min'), (), 'P', 'LLAMA_ARG_SPEC_DRAFT_P_MIN', 'string'),
    _o(
        ('--spec-draft-backend-sampling',),
        ('--no-spec-draft-backend-sampling',),
        None,
        'LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING',
        'bool',
    ),
    _o(('--spec-draft-sampling',), (), '{greedy,probabilistic}', 'LLAMA_ARG_SPEC_DRAFT_SAMPLING', 'string'),
    _o(('--spec-draft-device', '-devd', '--device-draft'), (), '<dev1,dev2,..>', None, 'string'),
    _o(
        ('--spec-draft-ngl', '-ngld', '--gpu-layers-draft', '--n-gpu-layers-draft'),
        (),
        'N',
        'LLAMA_ARG_N_GPU_LAYERS_DRAFT',
        'string',
    ),
    _o(('--spec-draft-model', '-md', '--model-draft'), (), 'FNAME', 'LLAMA_ARG_SPEC_DRAFT_MODEL', 'string'),
    _o(
        ('--spec-type',),
        (),
        'none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache',
        'LLAMA_ARG_SPEC_TYPE',
        'string',
    ),
    _o(('--spec-ngram-mod-n-min',), (), 'N', None, 'int'),
    _o(('--spec-ngram-mod-n-max',), (), 'N', None, 'int'),
    _o(('--spec-ngram-mod-n-match',), (), 'N', None, 'int'),
    _o(('--spec-ngram-simple-size-n',), (), 'N', None, 'int'),
    _o(('--spec-ngram-simple-size-m',), (), 'N', None, 'int'),
    _o(('--spec-ngram-simple-min-hits',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k-size-n',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k-size-m',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k-min-hits',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k4v-size-n',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k4v-size-m',), (), 'N', None, 'int'),
    _o(('--spec-ngram-map-k4v-min-hits',), (), 'N', None, 'int'),
    _o(('--draft', '--draft-n', '--draft-max'), (), 'N', 'LLAMA_ARG_DRAFT_MAX', 'int'),
    _o(('--draft-min', '--draft-n-min'), (), 'N', 'LLAMA_ARG_DRAFT_MIN', 'int'),
    _o(('--spec-ngram-size-n',), (), 'N', None, 'int'),
    _o(('--spec-ngram-size-m',), (), 'N', None, 'int'),
    _o(('--spec-ngram-min-hits',), (), 'N', None, 'int'),
    _o(('--embd-gemma-default',), (), None, None, 'void'),
    _o(('--fim-qwen-1.5b-default',), (), None, None, 'void'),
    _o(('--fim-qwen-3b-default',), (), None, None, 'void'),
    _o(('--fim-qwen-7b-default',), (), None, None, 'void'),
    _o(('--fim-qwen-7b-spec',), (), None, None, 'void'),
    _o(('--fim-qwen-14b-spec',), (), None, None, 'void'),
    _o(('--fim-qwen-30b-default',), (), None, None, 'void'),
    _o(('--gpt-oss-20b-default',), (), None, None, 'void'),
    _o(('--gpt-oss-120b-default',), (), None, None, 'void'),
    _o(('--vision-gemma-4b-default',), (), None, None, 'void'),
    _o(('--vision-gemma-12b-default',), (), None, None, 'void'),
    _o(('--spec-default',), (), None, None, 'void'),
    _o(('load-on-startup',), (), 'NAME', '__PRESET_LOAD_ON_STARTUP', 'string', preset_only=True),
    _o(('stop-timeout',), (), 'SECONDS', '__PRESET_STOP_TIMEOUT', 'int', preset_only=True),
    _o(('dedup-cache-models',), (), '0|1', '__PRESET_DEDUP_CACHE_MODELS', 'string', preset_only=True),
)
# fmt: on

#: Options whose handler appends to a list in b11434 (arg.cpp), so repeating them accumulates;
#: for every other option llama-server warns "only last value will be used" and the last one wins.
REPEATABLE: frozenset[str] = frozenset({
    "--reverse-prompt", "--logit-bias", "--rpc", "--override-tensor", "--cpu-moe", "--n-cpu-moe",
    "--n-cpu-ffn", "--override-kv", "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled",
    "--alias", "--tags", "--api-key", "--api-key-file", "--spec-draft-override-tensor", "--spec-draft-cpu-moe",
    "--spec-draft-n-cpu-moe", "--spec-synth-rates", "--spec-type",
})


@dataclass(frozen=True)
class RemovedOption:
    """An option older guides use that b11434 rejects, and what to write instead.

    `registered` ones still exist in the server only to throw "the argument has been removed" (so
    they appear in `--help` and a preset key for them is accepted at load but kills the child);
    the others are plain "invalid argument" / "option not recognized". When `field` is set the
    importer translates the option: to `value` for flags, to the given value otherwise.
    """

    spellings: tuple[str, ...]
    replacement: str
    takes_value: bool = False
    field: str | None = None
    value: str | None = None
    registered: bool = False

    @property
    def ini_keys(self) -> tuple[str, ...]:
        return tuple(s.lstrip("-") for s in self.spellings)


REMOVED: tuple[RemovedOption, ...] = (
    RemovedOption(("--no-mmap",), "--load-mode none", field="load_mode", value="none"),
    RemovedOption(("--mmap",), "--load-mode mmap", field="load_mode", value="mmap"),
    RemovedOption(("--mlock",), "--load-mode mlock", field="load_mode", value="mlock"),
    RemovedOption(
        ("--draft", "--draft-n", "--draft-max"), "--spec-draft-n-max N (or --spec-ngram-mod-n-max N)",
        takes_value=True, field="spec_draft_n_max", registered=True,
    ),
    RemovedOption(
        ("--draft-min", "--draft-n-min"), "--spec-draft-n-min N (or --spec-ngram-mod-n-min N)",
        takes_value=True, field="spec_draft_n_min", registered=True,
    ),
    RemovedOption(
        ("--spec-ngram-size-n",), "--spec-ngram-mod-n-match or --spec-ngram-{simple,map-k,map-k4v}-size-n",
        takes_value=True, registered=True,
    ),
    RemovedOption(
        ("--spec-ngram-size-m",), "--spec-ngram-{simple,map-k,map-k4v}-size-m", takes_value=True, registered=True,
    ),
    RemovedOption(
        ("--spec-ngram-min-hits",), "--spec-ngram-{simple,map-k,map-k4v}-min-hits", takes_value=True,
        registered=True,
    ),
)

#: Env names of removed options that the server still reads only to fail.
REMOVED_ENV: dict[str, RemovedOption] = {"LLAMA_ARG_DRAFT_MAX": REMOVED[3], "LLAMA_ARG_DRAFT_MIN": REMOVED[4]}


@cache
def _by_spelling() -> dict[str, ServerOption]:
    return {s: opt for opt in SERVER_OPTIONS if not opt.preset_only for s in opt.spellings}


@cache
def _by_ini_key() -> dict[str, ServerOption]:
    out: dict[str, ServerOption] = {}
    for opt in SERVER_OPTIONS:
        for key in opt.ini_keys:
            out[key] = opt
    return out


@cache
def _removed_by_spelling() -> dict[str, RemovedOption]:
    return {s: r for r in REMOVED for s in r.spellings}


def normalize_spelling(arg: str) -> str:
    """What the server matches: `--long_name` has its underscores turned into dashes (arg.cpp:832)."""
    return arg.replace("_", "-") if arg.startswith("--") else arg


def find_option(spelling: str) -> ServerOption | None:
    """The CLI option for a spelling like `-c`, `--ctx-size` or `--ctx_size`; None if unknown."""
    return _by_spelling().get(normalize_spelling(spelling))


def find_removed(spelling: str) -> RemovedOption | None:
    """The removal record for a CLI spelling (with dashes) or preset key (without)."""
    s = normalize_spelling(spelling)
    if not s.startswith("-"):
        s = f"--{s}"
    return _removed_by_spelling().get(s)


def option_for_ini_key(key: str) -> ServerOption | None:
    """The option a preset key maps to, matched literally as the preset parser does."""
    return _by_ini_key().get(key)


def all_ini_keys() -> frozenset[str]:
    """Every key a b11434 preset section may hold (plus `version`)."""
    return frozenset(_by_ini_key()) | {"version"}


def all_spellings() -> frozenset[str]:
    """Every CLI spelling b11434 registers (including removed ones that only throw)."""
    return frozenset(_by_spelling())


@dataclass(frozen=True)
class FieldSpec:
    """How one `Settings` field maps to a llama-server option.

    `kind`: `str`, `int`, `float`, `choice`, `ngl` (auto/all/N), `onoff` (bool written on/off),
    `spec` (spec-type list), `list_int`, `list_float`, `list_str` (comma lists), `flag` (True emits
    the flag), `negflag` (True emits the option's negative form). `ini=False` fields are not written
    to preset sections: the router forces host/port and strips api-key (server-models.cpp:479-531).
    """

    field: str
    spelling: str
    kind: str
    ini: bool = True

    @property
    def option(self) -> ServerOption:
        opt = find_option(self.spelling)
        assert opt is not None, self.spelling
        return opt

    @property
    def flag(self) -> str:
        """The spelling mtp-tune emits for this field."""
        if self.kind == "negflag":
            neg = self.option.canonical_neg
            assert neg is not None
            return neg
        return self.option.canonical

    @property
    def label(self) -> str:
        """The name used in messages (the long option name without dashes)."""
        return self.flag.lstrip("-")


#: Settings fields in the order they are emitted.
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("model", "--model", "str"),
    FieldSpec("hf_repo", "--hf-repo", "str"),
    FieldSpec("ctx_size", "--ctx-size", "int"),
    FieldSpec("batch_size", "--batch-size", "int"),
    FieldSpec("ubatch_size", "--ubatch-size", "int"),
    FieldSpec("parallel", "--parallel", "int"),
    FieldSpec("threads", "--threads", "int"),
    FieldSpec("threads_batch", "--threads-batch", "int"),
    FieldSpec("spec_type", "--spec-type", "spec"),
    FieldSpec("spec_draft_n_max", "--spec-draft-n-max", "int"),
    FieldSpec("spec_draft_n_min", "--spec-draft-n-min", "int"),
    FieldSpec("spec_draft_p_min", "--spec-draft-p-min", "float"),
    FieldSpec("cache_type_k", "--cache-type-k", "choice"),
    FieldSpec("cache_type_v", "--cache-type-v", "choice"),
    FieldSpec("cache_type_k_draft", "--spec-draft-type-k", "choice"),
    FieldSpec("cache_type_v_draft", "--spec-draft-type-v", "choice"),
    FieldSpec("flash_attn", "--flash-attn", "choice"),
    FieldSpec("fit", "--fit", "onoff"),
    FieldSpec("fit_target", "--fit-target", "list_int"),
    FieldSpec("fit_ctx", "--fit-ctx", "int"),
    FieldSpec("n_gpu_layers", "--gpu-layers", "ngl"),
    FieldSpec("split_mode", "--split-mode", "choice"),
    FieldSpec("tensor_split", "--tensor-split", "list_float"),
    FieldSpec("main_gpu", "--main-gpu", "int"),
    FieldSpec("cpu_moe", "--cpu-moe", "flag"),
    FieldSpec("n_cpu_moe", "--n-cpu-moe", "int"),
    FieldSpec("load_mode", "--load-mode", "choice"),
    FieldSpec("no_mmproj", "--mmproj-auto", "negflag"),
    FieldSpec("cache_ram", "--cache-ram", "int"),
    FieldSpec("rpc", "--rpc", "list_str"),
    FieldSpec("host", "--host", "str", ini=False),
    FieldSpec("port", "--port", "int", ini=False),
    FieldSpec("api_key", "--api-key", "str", ini=False),
    FieldSpec("metrics", "--metrics", "flag"),
)

FIELD_BY_NAME: dict[str, FieldSpec] = {f.field: f for f in FIELDS}


@cache
def _field_by_option() -> dict[ServerOption, FieldSpec]:
    return {f.option: f for f in FIELDS}


def field_for_option(opt: ServerOption) -> FieldSpec | None:
    """The Settings field an option fills, or None when it belongs in `extra_args`."""
    return _field_by_option().get(opt)


def describe_removed(spelling: str, removed: RemovedOption) -> str:
    """One sentence: what was removed and what to use instead."""
    return f"{spelling} was removed from llama-server ({TABLE_BUILD} rejects it); use {removed.replacement} instead"
