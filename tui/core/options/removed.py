"""Options older guides use that b11434 rejects, with what to write instead."""

from __future__ import annotations

from functools import cache

from tui.core.options.spec import FALSEY, RemovedOption, normalize_spelling
from tui.core.options.table import TABLE_BUILD

__all__ = ["REMOVED", "REMOVED_ENV", "describe_removed", "find_removed", "replacement_value"]

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
def _removed_by_spelling() -> dict[str, RemovedOption]:
    return {s: r for r in REMOVED for s in r.spellings}


def find_removed(spelling: str) -> RemovedOption | None:
    """The removal record for a CLI spelling (with dashes) or preset key (without)."""
    s = normalize_spelling(spelling)
    if not s.startswith("-"):
        s = f"--{s}"
    return _removed_by_spelling().get(s)


def describe_removed(spelling: str, removed: RemovedOption) -> str:
    """One sentence: what was removed and what to use instead."""
    return f"{spelling} was removed from llama-server ({TABLE_BUILD} rejects it); use {removed.replacement} instead"


#: What a removed flag's value means for its replacement (`load-mode`), on and off.
_FLAG_VALUES: dict[tuple[str, bool], str] = {
    ("--mmap", True): "mmap", ("--mmap", False): "none", ("--no-mmap", True): "none", ("--no-mmap", False): "mmap",
    ("--mlock", True): "mlock",
}


def replacement_value(removed: RemovedOption, value: str) -> str | None:
    """The replacement's value for a removed option set to `value` (`mmap = 0` -> `none`, `draft-max
    = 4` -> `4`); None when the setting is the default now (`mlock = 0`). The importer and `profile fix`
    both translate with this."""
    if removed.takes_value:
        return value
    on = value not in FALSEY
    return _FLAG_VALUES.get((removed.spellings[0], on), removed.value if on else None)
