"""Profiles: import a --models-preset INI or a pasted llama-server command, export as INI section,
TOML or argv, check a preset file the way llama-server reads it, repair one it refuses, list and show saved
profiles."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tui.cli._common import fail, print_json
from tui.core.options.argv import command_line, parse_command_line, settings_to_argv
from tui.core.options.redact import has_secret, kept_secrets, redact_argv
from tui.core.presets import (
    DEFAULT_MODELS_MAX,
    IniProblem,
    IniWriteError,
    read_preset,
    settings_from_section,
    write_section,
)
from tui.core.server.preset_check import check_with_server
from tui.core.presets.profiles import (
    ProfileError,
    check_name,
    delete_profile,
    list_profiles,
    load_profile,
    load_profile_file,
    profile_path,
    rename_profile,
    save_profile,
    settings_to_toml,
)
from tui.core.server.provision import ProvisionError, find_server
from tui.core.presets import atomic_write_bytes
from tui.core.presets.write import PRIVATE
from tui.core.presets.fix import PresetFixError, fix_preset
from tui.core.server.binary import accepted_options
from tui.core.options.settings import Settings
from tui.core.options.validate import Problem, combine, validate, value_errors

COMMAND = "profile"
HELP = "import, export, check, list and show settings profiles (TOML, --models-preset INI, argv)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    imp = sub.add_parser("import", help="save a profile from a preset INI, a TOML file or a pasted command line")
    src = imp.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="a --models-preset .ini or a profile .toml")
    src.add_argument("--command", dest="cmdline", metavar="CMD", help='a llama-server command line, e.g. "llama-server -m x.gguf -c 4096"')
    imp.add_argument("--name", help="profile name (default: the INI section, the TOML name, or the model file name)")
    imp.add_argument("--section", help="which INI section to import (default: every model section)")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing profile (the old one is backed up)")
    imp.add_argument("--keep-api-key", action="store_true", help="store the API key in the profile (default: not stored)")
    imp.add_argument("--keep-hf-token", action="store_true",
                     help="store the Hugging Face token (-hft) in the profile (default: not stored)")

    exp = sub.add_parser("export", help="write a profile as a preset section, a TOML file, or print its argv")
    exp.add_argument("name", help="profile name")
    dest = exp.add_mutually_exclusive_group(required=True)
    dest.add_argument("--ini", metavar="FILE", help="add or replace a section in this --models-preset file")
    dest.add_argument("--toml", metavar="FILE", help="write the profile to this TOML file")
    dest.add_argument("--argv", action="store_true", help="print the llama-server command, one shell-quoted line")
    exp.add_argument("--section", help="INI section name (default: the profile name)")
    exp.add_argument("--include-api-key", action="store_true", help="include the API key (argv and TOML only)")
    exp.add_argument("--include-hf-token", action="store_true",
                     help="include a stored Hugging Face token (argv and TOML only)")

    chk = sub.add_parser("check", help="report every problem in a preset file, with line numbers")
    chk.add_argument("file", help="the --models-preset .ini file")
    chk.add_argument("--json", action="store_true", help='print {"ok", "problems", "server_accepts"} as JSON')
    chk.add_argument("--server-bin", help="llama-server to ask (default: the one mtp-tune finds)")
    chk.add_argument("--no-server", action="store_true", help="do not start llama-server; server_accepts is null")
    chk.add_argument("--models-max", type=int, default=DEFAULT_MODELS_MAX, help="the router's --models-max (default 4)")

    fix = sub.add_parser("fix", help="repair a preset llama-server refuses: removed options migrated, a backup kept")
    fix.add_argument("file", help="the --models-preset .ini file (repaired in place; the old one is kept as FILE.bak)")
    fix.add_argument("--section", help="repair only this section")
    fix.add_argument("--dry-run", action="store_true", help="print what would change and write nothing")

    sub.add_parser("list", help="list saved profiles")

    show = sub.add_parser("show", help="print a profile, its llama-server command and its problems")
    show.add_argument("name")

    ren = sub.add_parser("rename", help="rename a profile")
    ren.add_argument("old")
    ren.add_argument("new")

    rm = sub.add_parser("delete", help="delete a profile (a copy is kept in profiles/.backups/)")
    rm.add_argument("name")


def _print_problems(problems: list[Problem] | list[IniProblem], stream: object = None) -> None:
    out = stream or sys.stdout
    for p in problems:
        print(f"  {p}", file=out)  # type: ignore[arg-type]


def _default_name(settings: Settings) -> str:
    base = Path(settings.model).stem if settings.model else (settings.hf_repo or "imported").split("/")[-1].split(":")[0]
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in base).strip("-.") or "imported"
    return cleaned[:64]


def _save(name: str, settings: Settings, overwrite: bool, notes: list[Problem], args: argparse.Namespace,
          where: str = "--command") -> int:
    if bad := value_errors(settings):  # a profile the loader would refuse is never written
        return fail(f"{where}: {bad[0].message} Nothing was saved.")
    try:
        check_name(name)
        if profile_path(name).exists() and not overwrite:
            return fail(f"profile {name!r} already exists; pass --overwrite to replace it (the old one is backed up) or --name to choose another name.")
        path = save_profile(name, settings, overwrite=True, include_api_key=args.keep_api_key,
                            include_hf_token=args.keep_hf_token)
    except ProfileError as e:
        return fail(str(e))
    problems = combine(notes, validate(settings, require_model=False))  # an unknown option named once
    print(f"saved profile {name}: {path}")
    if settings.api_key and not args.keep_api_key:
        print("  note: the API key was not stored (pass --keep-api-key to store it; the file is then readable only by you).")
    if has_secret(settings.extra_args, "--hf-token") and not args.keep_hf_token:
        print("  note: the Hugging Face token was not stored (set HF_TOKEN, or pass --keep-hf-token to store it; "
              "the file is then readable only by you).")
    if problems:
        _print_problems(problems)
    return 0


def _import(args: argparse.Namespace) -> int:
    if args.cmdline is not None:
        result = parse_command_line(args.cmdline)
        return _save(args.name or _default_name(result.settings), result.settings, args.overwrite, result.problems, args)
    path = Path(args.file)
    if not path.exists():
        return fail(f"{path} does not exist; give a --models-preset .ini file, a profile .toml, or --command.")
    if path.suffix.lower() == ".toml":
        try:
            settings = load_profile_file(path)
        except ProfileError as e:
            return fail(str(e))
        return _save(args.name or path.stem, settings, args.overwrite, [], args)
    try:
        pf = read_preset(path)
    except (OSError, UnicodeError) as e:
        return fail(f"{path}: cannot be read ({e}).")
    if pf.problems:
        print(f"{path}: {len(pf.problems)} problem(s) as llama-server reads it (importing anyway):")
        _print_problems(pf.problems)
    models = [m for m in pf.models if args.section in (None, m.name, m.model_name)]
    if not models:
        known = ", ".join(m.name for m in pf.models) or "none"
        return fail(f"{path}: no model section {'[' + args.section + '] ' if args.section else ''}to import (model sections: {known}).")
    if args.name and len(models) > 1:
        return fail(f"{path} has {len(models)} model sections ({', '.join(m.name for m in models)}); pick one with --section to use --name.")
    rc = 0
    for m in models:
        settings, preset_only, notes = settings_from_section(pf, m.name)
        if preset_only:
            notes.append(Problem("extra_args", "warning", f"preset-only keys not kept in the profile: {', '.join(f'{k} = {v}' for k, v in preset_only.items())}."))
        name = args.name or "".join(c if c.isalnum() or c in "._-" else "-" for c in m.model_name).strip("-.")[:64] or "default"
        line = next((p.line for p in pf.problems if p.section in (m.name, "*") and p.severity == "error"
                     and (bad := value_errors(settings)) and p.message.endswith(bad[0].message)), None)
        rc = max(rc, _save(name, settings, args.overwrite, notes, args, f"{path}:{line or '-'}: [{m.name}]"))
    return rc


def _export(args: argparse.Namespace) -> int:
    try:
        settings = load_profile(args.name)
    except ProfileError as e:
        return fail(str(e))
    if args.argv:
        problems = validate(settings)
        errs = [p for p in problems if p.severity == "error"]
        if errs:
            _print_problems(errs, sys.stderr)
            return fail(f"profile {args.name!r} has {len(errs)} error(s); fix them before exporting (mtp-tune profile show {args.name}).")
        _print_problems(problems, sys.stderr)
        keep = kept_secrets(api_key=args.include_api_key, hf_token=args.include_hf_token)
        print(command_line(redact_argv(settings_to_argv(settings, binary="llama-server"), keep=keep)))
        return 0
    if args.toml:
        target = Path(args.toml)
        try:
            if target.exists():  # the backup is no wider than the old file (it may hold a key)
                atomic_write_bytes(target.with_name(target.name + ".bak"), target.read_bytes(),
                                   mode=target.stat().st_mode & 0o7777)
            secret = (args.include_api_key and settings.api_key) or (
                args.include_hf_token and has_secret(settings.extra_args, "--hf-token"))
            text = settings_to_toml(settings, name=args.name, include_api_key=args.include_api_key,
                                    include_hf_token=args.include_hf_token)
            atomic_write_bytes(target, text.encode(), mode=PRIVATE if secret else None)
        except OSError as e:
            return fail(f"{target}: cannot be written ({e}).")
        print(f"wrote {target}")
        return 0
    section = args.section or args.name
    if settings.api_key:
        print("note: the API key is not written to presets (the router strips it); start the router with --api-key.", file=sys.stderr)
    if has_secret(settings.extra_args, "--hf-token"):
        print("note: the Hugging Face token is not written to presets; start the router with HF_TOKEN set.", file=sys.stderr)
    try:
        result = write_section(args.ini, section, settings)
    except (IniWriteError, OSError) as e:
        return fail(str(e))
    verb = "replaced" if result.replaced else "added"
    extra = f" (backup: {result.backup})" if result.backup else ""
    print(f"{verb} [{section}] in {result.path}{extra}")
    if result.removed_duplicates:
        print(f"removed {result.removed_duplicates} later duplicate [{section}] section(s) that would have replaced it")
    return 0


def _check(args: argparse.Namespace) -> int:
    path = Path(args.file)
    server = None
    if not args.no_server:
        try:
            found = find_server(args.server_bin)
        except ProvisionError as e:
            return fail(str(e))
        server = found.path if found else None
    accepted = None
    if server is not None:
        try:
            accepted = accepted_options(server)
        except (OSError, Exception):  # a broken binary must not hide the file's problems
            accepted = None
    try:
        pf = read_preset(path, accepted=accepted or None, models_max=args.models_max)
    except FileNotFoundError as e:
        return fail(str(e))
    except OSError as e:
        return fail(f"{path}: cannot be read ({e}).")
    server_accepts: bool | None = None
    server_msg = "no llama-server found; only mtp-tune's reading of the file" if server is None and not args.no_server else ""
    if server is not None:
        accepted_by_router, server_msg = check_with_server(server, path)
        server_accepts = accepted_by_router and pf.server_accepts
        if accepted_by_router and not pf.server_accepts:
            server_msg = "the router started, but " + next(p.message for p in pf.problems if p.rejects)
    ok = pf.ok and server_accepts is not False
    if args.json:
        print_json({"ok": ok, "problems": [p.to_dict() for p in pf.problems], "server_accepts": server_accepts})
        return 0 if ok else 1
    for p in pf.problems:
        print(f"{path}:{p.line or '-'}: {p.severity}: {f'[{p.section}] ' if p.section is not None else ''}{p.message}")
    n_err = sum(p.severity == "error" for p in pf.problems)
    n_warn = len(pf.problems) - n_err
    models = ", ".join(m.model_name for m in pf.models) or "none"
    print(f"{path}: {n_err} error(s), {n_warn} warning(s); models: {models}")
    if server is not None:
        print(f"installed llama-server ({server}): {'accepts' if server_accepts else 'REFUSES'} the file: {server_msg}")
    elif server_msg:
        print(server_msg)
    return 0 if ok else 1


def _fix(args: argparse.Namespace) -> int:
    try:
        res = fix_preset(args.file, args.section, dry_run=args.dry_run)
    except (PresetFixError, FileNotFoundError) as e:
        return fail(str(e))
    except OSError as e:
        return fail(f"{args.file}: cannot be read or written ({e}).")
    if not res.changes:
        print(f"{res.path}: no removed options to migrate; nothing changed.")
        return 0
    for c in res.changes:
        print(f"{res.path}:{c}")
    if res.written:
        print(f"{res.path}: {len(res.changes)} line(s) repaired; the previous file is kept as {res.backup}.")
    else:
        print(f"{res.path}: dry run, nothing written ({len(res.changes)} line(s) would change).")
    for p in res.remaining:
        print(f"{res.path}: still refused by llama-server outside [{args.section}]: {p}")
    return 0


def _list(_: argparse.Namespace) -> int:
    profiles = list_profiles()
    if not profiles:
        print("no profiles yet (mtp-tune profile import ...)")
        return 0
    for info in profiles:
        try:
            s = load_profile(info.name)
            what = s.model or s.hf_repo or "(no model)"
            mtp = " mtp" if s.mtp_enabled else ""
        except ProfileError:
            what, mtp = "(unreadable)", ""
        print(f"{info.name}\t{info.modified:%Y-%m-%d %H:%M}\t{what}{mtp}")
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        s = load_profile(args.name)
    except ProfileError as e:
        return fail(str(e))
    print(f"# {profile_path(args.name)}")
    print(settings_to_toml(s, name=args.name).rstrip())
    print()
    print(command_line(settings_to_argv(s, binary="llama-server", redact=True)))
    problems = validate(s)
    if problems:
        print()
        _print_problems(problems)
    return 0


def _rename(args: argparse.Namespace) -> int:
    try:
        path = rename_profile(args.old, args.new)
    except ProfileError as e:
        return fail(str(e))
    print(f"renamed {args.old} -> {args.new}: {path}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    try:
        backup = delete_profile(args.name)
    except ProfileError as e:
        return fail(str(e))
    print(f"deleted {args.name} (a copy is kept at {backup})")
    return 0


def run(args: argparse.Namespace) -> int:
    return {
        "import": _import, "export": _export, "check": _check, "fix": _fix, "list": _list, "show": _show,
        "rename": _rename, "delete": _delete,
    }[args.action](args)
