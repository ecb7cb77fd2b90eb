"""llama-server's options as data, and the one reader of argv that follows llama.cpp's rules.

`table` holds every b11434 option (spellings, env names, value or flag, repeatable or last-wins) and
the Settings fields that map onto them; `reader` scans an argv with exactly those rules.
"""

from tui.core.options.table import *  # noqa: F401,F403  (the table is this package's public API)
from tui.core.options.table import __all__ as _table_all

__all__ = list(_table_all)
