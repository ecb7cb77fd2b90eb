"""TOML profiles (`config_dir()/profiles/NAME.toml`) and the launch history (`config_dir()/history/`).

Why TOML: people edit profiles by hand and diff them; `tomllib` reads and `tomli_w` writes it.
Why a history: every configuration mtp-tune launches is recorded automatically, so nothing tried
is lost. Writes are atomic (temp file + `os.replace`); overwriting or deleting a profile keeps the
old file under `profiles/.backups/`. The API key and the Hugging Face token are never written to
history, and only written to a profile when the caller asks for it explicitly; the folders are 0700.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import tomli_w

from tui.core.config.paths import config_dir, private_dir
from tui.core.presets.write import PRIVATE, atomic_write_bytes
from tui.core.options.redact import REDACTED, has_secret, kept_secrets, redact_argv
from tui.core.options.settings import Settings
from tui.core.options.validate import value_errors

FORMAT = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SECRET_KEYS = re.compile(r"api[-_]?key|authorization|token|password|secret", re.I)


class ProfileError(Exception):
    """A one-paragraph explanation naming the profile/file, line or key, and what to do."""


def profiles_dir() -> Path:
    return config_dir() / "profiles"


def history_dir() -> Path:
    return config_dir() / "history"


def backups_dir() -> Path:
    return profiles_dir() / ".backups"


def check_name(name: str) -> str:
    """Profile names become file names: letters, digits, '.', '_', '-' (max 64, no leading dot)."""
    if not _NAME.match(name or "") or name.endswith(".toml"):
        raise ProfileError(f"profile name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (and no .toml suffix).")
    return name


def profile_path(name: str) -> Path:
    return profiles_dir() / f"{check_name(name)}.toml"


# --------------------------------------------------------------------------- settings <-> TOML


def settings_to_dict(settings: Settings, *, include_api_key: bool = False, include_hf_token: bool = False
                     ) -> dict[str, Any]:
    """The `[settings]` table: set fields only (TOML has no null), by Settings field name; secrets in
    `extra_args` masked unless asked for (`include_api_key`, `include_hf_token`)."""
    out: dict[str, Any] = {}
    defaults = Settings()
    keep = kept_secrets(api_key=include_api_key, hf_token=include_hf_token)
    settings = replace(settings, extra_args=redact_argv(settings.extra_args, keep=keep))
    for f in fields(Settings):
        v = getattr(settings, f.name)
        if f.name == "api_key":
            if v and include_api_key:
                out[f.name] = v
            continue
        if v is None or (isinstance(v, list) and not v and getattr(defaults, f.name) == []):
            continue
        out[f.name] = list(v) if isinstance(v, list) else v
    return out


def _field_types() -> dict[str, str]:
    """Field name -> 'str' | 'int' | 'float' | 'bool' | 'list[str]' | 'list[int]' | 'list[float]'."""
    out: dict[str, str] = {}
    for f in fields(Settings):
        t = str(f.type).replace(" ", "")
        if t.startswith("list["):
            out[f.name] = t.split("|")[0]
        elif "bool" in t:
            out[f.name] = "bool"
        elif "int" in t:
            out[f.name] = "int"
        elif "float" in t:
            out[f.name] = "float"
        else:
            out[f.name] = "str"
    return out


def _key_line(text: str | None, key: str) -> str:
    if not text:
        return ""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return f" (line {i})"
    return ""


def _coerce(name: str, kind: str, v: Any, where: str) -> Any:
    def bad(expected: str) -> ProfileError:
        return ProfileError(f"{where}: {name} = {v!r} should be {expected}; fix or delete that line.")

    if kind == "bool":
        if not isinstance(v, bool):
            raise bad("true or false")
        return v
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad("a whole number")
        return v
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise bad("a number")
        return float(v)
    if kind == "str":
        if not isinstance(v, str):
            raise bad("text in quotes")
        return v
    item = kind[5:-1]
    if not isinstance(v, list):
        raise bad(f"a list like [{'1, 2' if item != 'str' else chr(34) + 'a' + chr(34)}]")
    return [_coerce(name, item, x, where) for x in v]


def settings_from_dict(data: dict[str, Any], source: str = "profile", text: str | None = None) -> Settings:
    """Settings from a `[settings]` table; errors name the source, line and key."""
    types = _field_types()
    kwargs: dict[str, Any] = {}
    for key, v in data.items():
        where = f"{source}{_key_line(text, key)}"
        if key not in types:
            hint = ""
            alt = key.replace("-", "_")
            if alt in types:
                hint = f" Write {alt!r} (Settings field names use '_')."
            raise ProfileError(f"{where}: unknown setting {key!r}.{hint} Known settings: {', '.join(types)}.")
        kind = types[key]
        # n_gpu_layers is text ("auto", "all", "12") but a bare number is the obvious spelling
        if key == "n_gpu_layers" and isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        kwargs[key] = _coerce(key, kind, v, where)
    if kwargs.get("api_key") == REDACTED:
        kwargs["api_key"] = None
    settings = Settings(**kwargs)
    bad = value_errors(settings)  # the form's own check: a value llama-server refuses never loads
    if bad:
        raise ProfileError(f"{source}{_key_line(text, bad[0].field)}: {bad[0].message} Fix or delete that line.")
    return settings


def settings_to_toml(settings: Settings, *, name: str | None = None, include_api_key: bool = False,
                     meta: dict[str, Any] | None = None, include_hf_token: bool = False) -> str:
    """A profile document: `format`, optional `name` and metadata, and the `[settings]` table."""
    doc: dict[str, Any] = {"format": FORMAT}
    if name:
        doc["name"] = name
    if meta:
        doc.update(_toml_safe(meta))
    doc["settings"] = settings_to_dict(settings, include_api_key=include_api_key, include_hf_token=include_hf_token)
    header = "# mtp-tune profile: llama-server settings (see `mtp-tune profile show`)\n"
    if settings.api_key and not include_api_key:
        header += "# the API key is not stored; set it in mtp-tune or pass --api-key yourself\n"
    if has_secret(settings.extra_args, "--hf-token") and not include_hf_token:
        header += "# the Hugging Face token is not stored; set HF_TOKEN or pass -hft yourself\n"
    return header + tomli_w.dumps(doc)


def settings_from_toml(text: str, source: str = "profile") -> Settings:
    """Parse a profile document (or a bare `[settings]`-less table of fields)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{source}: not valid TOML: {e}. Fix the file or restore it from profiles/.backups/.") from None
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise ProfileError(f"{source}: profile format {fmt!r} is not supported (this mtp-tune reads format {FORMAT}).")
    table = doc.get("settings")
    if table is None:
        table = {k: v for k, v in doc.items() if k not in ("format", "name")}
    if not isinstance(table, dict):
        raise ProfileError(f"{source}: [settings] must be a table.")
    return settings_from_dict(table, source, text)


def _toml_safe(obj: Any) -> Any:
    """Values TOML can hold: drop None, stringify the unknown, redact secrets by key name."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if v is None:
                continue
            out[str(k)] = REDACTED if _SECRET_KEYS.search(str(k)) and isinstance(v, str) and v else _toml_safe(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [_toml_safe(x) for x in obj if x is not None]
    if isinstance(obj, (str, int, float, bool, _dt.datetime, _dt.date)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _toml_safe(dataclasses.asdict(obj))
    return str(obj)


# --------------------------------------------------------------------------- profile files


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    path: Path
    modified: _dt.datetime


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def _backup(path: Path) -> Path:
    """A copy of `path` under `profiles/.backups/`, created 0600 (the old content may hold a key)."""
    private_dir(backups_dir())
    dest = backups_dir() / f"{path.stem}.{_stamp()}.toml"
    data = path.read_bytes()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    st = path.stat()
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    return dest


def save_profile(name: str, settings: Settings, *, overwrite: bool = True, include_api_key: bool = False,
                 include_hf_token: bool = False) -> Path:
    """Write profile `name`; an existing one is backed up first (or refused with `overwrite=False`)."""
    path = profile_path(name)
    private_dir(path.parent)
    if path.exists():
        if not overwrite:
            raise ProfileError(f"profile {name!r} already exists ({path}); choose another name or allow overwriting.")
        _backup(path)
    text = settings_to_toml(settings, name=name, include_api_key=include_api_key, include_hf_token=include_hf_token)
    secret = (include_api_key and settings.api_key) or (include_hf_token and has_secret(settings.extra_args, "--hf-token"))
    # a kept secret: 0600 from the file's creation on, also over an existing 0644 profile
    atomic_write_bytes(path, text.encode(), mode=PRIVATE if secret else None)
    return path


def load_profile(name: str) -> Settings:
    path = profile_path(name)
    if not path.exists():
        known = ", ".join(p.name for p in list_profiles()) or "none yet"
        raise ProfileError(f"no profile named {name!r} in {profiles_dir()} (profiles: {known}).")
    return load_profile_file(path)


def load_profile_file(path: str | os.PathLike[str]) -> Settings:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{p}: cannot be read ({e}).") from None
    return settings_from_toml(text, str(p))


def list_profiles() -> list[ProfileInfo]:
    """Profiles sorted by name."""
    d = profiles_dir()
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.toml")):
        if _NAME.match(p.stem):
            out.append(ProfileInfo(p.stem, p, _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.timezone.utc)))
    return out


def rename_profile(old: str, new: str) -> Path:
    src, dst = profile_path(old), profile_path(new)
    if not src.exists():
        raise ProfileError(f"no profile named {old!r} to rename.")
    if dst.exists():
        raise ProfileError(f"profile {new!r} already exists; delete it first or choose another name.")
    text = src.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("name") == old:
        doc["name"] = new
        text = "\n".join(l for l in text.splitlines() if l.startswith("#")) + "\n" + tomli_w.dumps(doc)
    atomic_write_bytes(dst, text.encode(), mode=src.stat().st_mode & 0o7777)
    src.unlink()
    return dst


def delete_profile(name: str) -> Path:
    """Delete profile `name`; the file is moved to `profiles/.backups/` so it can be restored."""
    path = profile_path(name)
    if not path.exists():
        raise ProfileError(f"no profile named {name!r} to delete.")
    dest = _backup(path)
    path.unlink()
    return dest


# --------------------------------------------------------------------------- launch history


@dataclass(frozen=True)
class HistoryEntry:
    path: Path
    launched_at: _dt.datetime
    settings: Settings
    server: dict[str, Any]


def record_launch(settings: Settings, server_info: dict[str, Any] | None = None) -> Path:
    """Record a launched configuration in `history/`; the API key is always redacted."""
    now = _dt.datetime.now(_dt.timezone.utc)
    d = private_dir(history_dir())
    model = Path(settings.model).stem if settings.model else (settings.hf_repo or "no-model")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model)[:48].strip("-") or "model"
    base = f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{slug}"
    path = d / f"{base}.toml"
    n = 1
    while path.exists():
        n += 1
        path = d / f"{base}-{n}.toml"
    doc: dict[str, Any] = {"format": FORMAT, "launched_at": now}
    s = settings_to_dict(settings.redacted(), include_api_key=True)
    if "api_key" in s:
        s["api_key"] = REDACTED
    doc["settings"] = s
    if server_info:
        doc["server"] = _toml_safe(server_info)
    atomic_write_bytes(path, ("# mtp-tune launch history (written automatically)\n" + tomli_w.dumps(doc)).encode())
    return path


def load_history_entry(path: str | os.PathLike[str]) -> HistoryEntry:
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ProfileError(f"{p}: unreadable history entry ({e}).") from None
    settings = settings_from_dict(doc.get("settings", {}), str(p))
    when = doc.get("launched_at")
    if not isinstance(when, _dt.datetime):
        when = _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.timezone.utc)
    return HistoryEntry(p, when, settings, dict(doc.get("server", {})))


def list_history(limit: int | None = None) -> list[HistoryEntry]:
    """Recorded launches, newest first; unreadable files are skipped."""
    d = history_dir()
    if not d.is_dir():
        return []
    out: list[HistoryEntry] = []
    for p in sorted(d.glob("*.toml"), reverse=True):
        try:
            out.append(load_history_entry(p))
        except ProfileError:
            continue
        if limit is not None and len(out) >= limit:
            break
    return out


__all__ = [
    "HistoryEntry", "backups_dir", "ProfileError", "ProfileInfo", "check_name", "delete_profile",
    "list_history", "list_profiles", "load_history_entry", "load_profile", "load_profile_file",
    "profile_path", "profiles_dir", "history_dir", "record_launch", "rename_profile", "save_profile",
    "settings_from_dict", "settings_from_toml", "settings_to_dict", "settings_to_toml",
]
