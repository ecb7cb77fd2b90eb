"""llama-server's options as data, the one argv reader, the settings model and its one validator.

Layout: `spec` (the types), `table` (b11434's registry, generated), `rules` (value types, defaults,
ranges), `removed` (rejected options), `lookup` (find by spelling/key, `default`), `fields` (Settings
field <-> option), `reader` (argv scan with llama.cpp's rules), `redact`, `settings` (the model),
`argv` (Settings <-> argv), `validate` (every rule, and `check_argv` for the CLI). This package
namespace re-exports the table's public names; import the others from their modules.
"""

from tui.core.options.fields import FIELD_BY_NAME, FIELDS, FieldSpec, field_for_option
from tui.core.options.lookup import (
    all_ini_keys,
    all_spellings,
    default,
    find_option,
    option_for_env,
    option_for_ini_key,
    rule,
)
from tui.core.options.removed import REMOVED, REMOVED_ENV, describe_removed, find_removed
from tui.core.options.rules import CACHE_TYPES, FLASH_ATTN, LOAD_MODES, RULES, SPEC_TYPES, SPLIT_MODES
from tui.core.options.spec import (
    FALSEY,
    TRUTHY,
    RemovedOption,
    ServerOption,
    ValueRule,
    is_falsey,
    is_truthy,
    normalize_spelling,
)
from tui.core.options.table import REPEATABLE, SERVER_OPTIONS, TABLE_BUILD

__all__ = [
    "CACHE_TYPES", "FALSEY", "FIELDS", "FIELD_BY_NAME", "FLASH_ATTN", "FieldSpec", "LOAD_MODES", "REMOVED",
    "REMOVED_ENV", "REPEATABLE", "RULES", "RemovedOption", "SERVER_OPTIONS", "SPEC_TYPES", "SPLIT_MODES",
    "ServerOption", "TABLE_BUILD", "TRUTHY", "ValueRule", "all_ini_keys", "all_spellings", "default",
    "describe_removed", "field_for_option", "find_option", "find_removed", "is_falsey", "is_truthy",
    "normalize_spelling", "option_for_env", "option_for_ini_key", "rule",
]
