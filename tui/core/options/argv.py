"""Settings <-> llama-server argv, and import of a pasted llama-server command line.

Why an argv list and never a shell string: the launcher execs the list directly, so paths with
spaces, quotes or `;` cannot break or inject anything. A shell-quoted line exists only for display
(`command_line`). The importer reads argv with `reader.scan`, i.e. llama-server's own rules: the last
value wins, repeatable options (`-ot`, `--spec-type`, `--rpc`, ...) accumulate, an option's value is
the next token whatever it looks like. On top it understands what people paste from guides: shell
quoting and line continuations, `--flag=value` (which llama-server itself rejects), env assignments
in front, removed flags (translated when possible) and unknown flags (kept in `extra_args`, warned).
A value that is not of its field's type is reported and the field left unset.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace

from tui.core.options.fields import FIELD_BY_NAME, FIELDS, FieldSpec, field_for_option
from tui.core.options.lookup import option_for_env
from tui.core.options.problems import Problem, label
from tui.core.options.reader import Occurrence, scan
from tui.core.options.redact import REDACTED, redact_argv
from tui.core.options.removed import REMOVED_ENV, describe_removed, find_removed
from tui.core.options.settings import Settings, effective_spec_types
from tui.core.options.spec import TRUTHY, ServerOption, normalize_spelling
from tui.core.options.table import TABLE_BUILD
from tui.core.options.values import BadValue, format_value, parse_value

_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"env", "exec", "nohup", "time", "command"})
#: Repeatable options whose field holds the accumulated list; the other repeatable fields keep the
#: first occurrence and pass later ones through in `extra_args`, so the server still sees them all.
_ACCUMULATED_FIELDS = frozenset({"spec_type", "rpc"})


# --------------------------------------------------------------------------- export


def settings_to_argv(
    settings: Settings,
    *,
    binary: str | os.PathLike[str] | None = None,
    include_extra: bool = True,
    redact: bool = False,
) -> list[str]:
    """The llama-server argument list for `settings` (with `binary` first when given).

    Only set fields are emitted, with their canonical long spellings, in `options.FIELDS` order;
    `extra_args` follow verbatim. `redact=True` hides the secrets, the API key and `-hft` (for logs and
    display; `redact.SECRET_OPTIONS`).
    """
    out: list[str] = [os.fspath(binary)] if binary is not None else []
    for spec in FIELDS:
        value = getattr(settings, spec.field)
        text = format_value(spec, value)
        if text is None:
            continue
        out.append(spec.flag)
        if spec.kind not in ("flag", "negflag"):
            out.append(REDACTED if redact and spec.field == "api_key" else text)
    if include_extra:
        out.extend(str(a) for a in settings.extra_args)
    return redact_argv(out) if redact else out


def command_line(argv: list[str]) -> str:
    """One shell-quoted line for display and copy-paste; never executed by mtp-tune."""
    return shlex.join(argv)


# --------------------------------------------------------------------------- import


@dataclass
class ArgvImport:
    """What an imported command line became: settings, the binary, env assignments, and problems."""

    settings: Settings
    problems: list[Problem] = field(default_factory=list)
    binary: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


class _Importer:
    """Applies options one at a time with llama-server's semantics (last value wins, lists accumulate)."""

    def __init__(self, base: Settings) -> None:
        self.s = replace(base, spec_type=list(base.spec_type), rpc=list(base.rpc), extra_args=list(base.extra_args))
        self.problems: list[Problem] = []
        self.seen: dict[str, str] = {}  # field -> spelling first seen
        self.spec_lists: list[list[str]] = []
        self.rpc_lists: list[list[str]] = []

    def warn(self, field_: str, message: str, severity: str = "warning") -> None:
        self.problems.append(Problem(field_, severity, message))  # type: ignore[arg-type]

    def set_field(self, spec: FieldSpec, spelling: str, raw: str | None, negative: bool = False) -> None:
        if spec.kind == "spec":
            self.spec_lists.append(str(raw).split(",") if raw else [])
            return
        if spec.field == "rpc":
            self.rpc_lists.append([p for p in str(raw).split(",") if p])
            return
        if spec.field in self.seen and spec.option.repeatable and spec.kind not in ("flag", "negflag"):
            self.s.extra_args.extend([spelling] if raw is None else [spelling, raw])
            return
        if spec.field in self.seen and spec.kind not in ("flag", "negflag"):
            self.warn(spec.field, f"{spelling} is given more than once; the last value wins (llama-server warns about this too).")
        self.seen[spec.field] = spelling
        if spec.kind == "flag":
            setattr(self.s, spec.field, not negative)
        elif spec.kind == "negflag":
            setattr(self.s, spec.field, negative)
        else:
            try:
                setattr(self.s, spec.field, parse_value(spec, str(raw)))
            except BadValue as e:
                self.warn(spec.field, f"{e} ({spelling} {raw!r} was not imported)", "error")

    def apply_removed(self, spelling: str, value: str | None) -> None:
        removed = find_removed(spelling)
        assert removed is not None
        if removed.field is None:
            self.warn("extra_args", describe_removed(spelling, removed) + "; it was dropped.", "error")
            return
        new_value = removed.value if removed.value is not None else value
        if removed.field == "load_mode":
            cur = self.s.load_mode
            if {cur, new_value} == {"mmap", "mlock"}:
                new_value = "mmap+mlock"
        spec = FIELD_BY_NAME[removed.field]
        try:
            setattr(self.s, removed.field, parse_value(spec, str(new_value)))
        except BadValue as e:
            self.warn(removed.field, f"{describe_removed(spelling, removed)}; {e}", "error")
            return
        shown = f"{spelling} {value}" if value is not None else spelling
        self.warn(removed.field, f"{describe_removed(spelling, removed)}; imported {shown} as --{label(removed.field)} {getattr(self.s, removed.field)}.")

    def finish(self) -> None:
        if len(self.spec_lists) == 1:
            self.s.spec_type = self.spec_lists[0]
        elif self.spec_lists:
            merged: list[str] = []
            for lst in self.spec_lists:
                eff = effective_spec_types(lst)
                if lst and not eff and lst != ["none"]:
                    self.warn("spec_type", f"--spec-type {','.join(lst)} enables nothing: a list containing none is just none.")
                merged.extend(eff)
            self.s.spec_type = merged
        if self.rpc_lists:
            self.s.rpc = [ep for lst in self.rpc_lists for ep in lst]


def _apply_env(imp: _Importer, env: dict[str, str]) -> None:
    """LLAMA_ARG_* assignments in front of the command apply before the CLI (arg.cpp:790)."""
    for name, value in env.items():
        if name in REMOVED_ENV:
            removed = REMOVED_ENV[name]
            imp.warn("extra_args", f"{name}: {describe_removed(name, removed)}; llama-server fails when it is set.", "error")
            continue
        found = option_for_env(name)
        if not found:
            imp.warn("extra_args", f"{name}={value} in front of the command is not a llama-server option; set it in your environment yourself if you need it.")
            continue
        opt, is_no = found
        if opt.neg:  # a bool option: LLAMA_ARG_NO_X always means off (arg.cpp:125-143)
            positive = False if is_no else value in TRUTHY
        else:  # a plain flag triggers only on a truthy value (arg.cpp:792)
            positive = value in TRUTHY
        spec = field_for_option(opt)
        if spec is None:
            if opt.takes_value:
                imp.s.extra_args += [opt.canonical, value]
            elif opt.neg:
                imp.s.extra_args.append(opt.canonical if positive else str(opt.canonical_neg))
            elif positive:
                imp.s.extra_args.append(opt.canonical)
            continue
        if spec.kind == "flag":
            if positive:
                imp.set_field(spec, name, None)
        elif spec.kind == "negflag":
            imp.set_field(spec, name, None, negative=not positive)
        else:
            imp.set_field(spec, name, value)
        imp.seen.pop(spec.field, None)  # the CLI may override env without a warning


def _looks_like_value(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return True
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _tokens(args: list[str]) -> list[Occurrence | str]:
    """`reader.scan`, except that a bare `-fa` (old guides: a flag) does not eat the option after it."""
    out: list[Occurrence | str] = []
    start = 0
    while True:
        for t in scan(args[start:]):
            if (isinstance(t, Occurrence) and t.option.canonical == "--flash-attn" and not t.inline
                    and t.value is not None and not _looks_like_value(t.value)):
                out.append(replace(t, value=None))
                start += t.index + 1
                break
            out.append(t)
        else:
            return out


def settings_from_argv(args: list[str], *, base: Settings | None = None, env: dict[str, str] | None = None) -> ArgvImport:
    """Parse llama-server arguments (without the binary) into Settings, with llama-server's rules.

    Starts from `base` (default: `Settings(metrics=False)`, since an argv without `--metrics` means
    metrics off). Unknown flags and options without a Settings field go to `extra_args` verbatim,
    each occurrence in order (so repeatable ones such as `-ot` all reach the server).
    """
    imp = _Importer(base if base is not None else Settings(metrics=False))
    if env:
        _apply_env(imp, env)
    toks = _tokens([str(a) for a in args])
    i = 0
    while i < len(toks):
        t = toks[i]
        i += 1
        if isinstance(t, str):
            i = _plain_token(imp, t, toks, i)
            continue
        spelling = normalize_spelling(t.spelling)
        if find_removed(spelling) is not None:
            if t.missing_value:
                imp.warn("extra_args", f"{spelling} needs a value, but the command ends there.", "error")
            else:
                imp.apply_removed(spelling, t.value)
            continue
        opt = t.option
        value = t.value
        if opt.takes_value:
            if t.inline:
                imp.warn(_field_name(opt), f"{t.spelling}={value}: llama-server does not accept --flag=value; mtp-tune passes it as {spelling} {value!r}.")
            elif opt.canonical == "--flash-attn" and value is None:
                value = "on"
                imp.warn("flash_attn", f"{spelling} takes a value since 2025 (on, off or auto); imported the bare flag as on.")
            elif t.missing_value:
                imp.warn(_field_name(opt), f"{spelling} needs a value, but the command ends there.", "error")
                continue
            elif value is not None and not _looks_like_value(value):
                # llama-server takes the next token whatever it is: `-c -np 1` sets ctx-size to "-np".
                imp.warn(_field_name(opt), f"{spelling} takes {value!r} as its value; if {value} was meant "
                         f"as an option, {spelling} is missing its value.")
        elif t.inline:
            imp.warn(_field_name(opt), f"{t.spelling}=...: {spelling} is a flag and takes no value; the value was ignored.")
        spec = field_for_option(opt)
        if spec is None:
            imp.s.extra_args.extend([spelling] if value is None else [spelling, value])
            continue
        imp.set_field(spec, spelling, value, negative=t.negative)
    imp.finish()
    return ArgvImport(imp.s, imp.problems, env=dict(env or {}))


def _plain_token(imp: _Importer, tok: str, toks: list[Occurrence | str], i: int) -> int:
    """A token that is no registered option: a removed one, an unknown one, or a stray value."""
    if not tok.startswith("-") or _looks_like_value(tok):
        imp.s.extra_args.append(tok)
        imp.warn("extra_args", f"{tok!r} is not an option (llama-server takes no positional arguments); kept in extra arguments.")
        return i
    spelling, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
    spelling = normalize_spelling(spelling)
    removed = find_removed(spelling)
    if removed is not None:
        value: str | None = None
        if removed.takes_value:
            if eq:
                value = inline
            elif i < len(toks):
                nxt = toks[i]
                value = nxt if isinstance(nxt, str) else nxt.spelling
                i += 1
            else:
                imp.warn("extra_args", f"{spelling} needs a value, but the command ends there.", "error")
                return i
        imp.apply_removed(spelling, value)
        return i
    kept = [tok]
    if not eq and i < len(toks) and isinstance(toks[i], str) and _looks_like_value(str(toks[i])):
        kept.append(str(toks[i]))
        i += 1
    imp.s.extra_args.extend(kept)
    imp.problems.append(Problem("extra_args", "warning", f"{spelling} is not an option of llama-server {TABLE_BUILD}; "
                                "kept in extra arguments, but the server will refuse to start with it.", option=spelling))
    return i


def _field_name(opt: ServerOption) -> str:
    spec = field_for_option(opt)
    return spec.field if spec else "extra_args"


def split_command(text: str) -> list[str]:
    """Shell words of a pasted command: handles quotes, `\\`/`^`/backtick line continuations,
    a leading `$ ` prompt and a trailing `# comment`."""
    text = re.sub(r"[\\^`]\r?\n", " ", text.strip())
    text = re.sub(r"^\$\s+", "", text)
    words = shlex.split(text)
    for j, w in enumerate(words):
        if w.startswith("#"):
            return words[:j]
    return words


def parse_command_line(text: str, *, base: Settings | None = None) -> ArgvImport:
    """Import a pasted `llama-server ...` command line (env assignments and a binary are optional)."""
    try:
        words = split_command(text)
    except ValueError as e:
        return ArgvImport(base or Settings(metrics=False), [Problem("extra_args", "error", f"the command line cannot be split into words ({e}); check its quotes.")])
    env: dict[str, str] = {}
    while words and (_ENV_ASSIGN.match(words[0]) or words[0] in _WRAPPERS):
        w = words.pop(0)
        if "=" in w:
            k, _, v = w.partition("=")
            env[k] = v
    binary: str | None = None
    if words and not words[0].startswith("-"):
        binary = words.pop(0)
        if os.path.basename(binary) == "llama" and words and words[0] in ("serve", "server"):
            binary = f"{binary} {words.pop(0)}"
    result = settings_from_argv(words, base=base, env=env)
    result.binary = binary
    if binary is not None and "llama" not in os.path.basename(binary.split(" ")[0]) and "server" not in binary:
        result.problems.insert(0, Problem("extra_args", "warning", f"{binary!r} does not look like llama-server; its arguments were imported anyway."))
    return result
