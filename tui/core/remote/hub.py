"""Which file(s) `-hf REPO[:QUANT]` means, by the installed llama-server's own rules.

Ported from llama.cpp b11434, common/download.cpp and common/hf-cache.cpp:
- the endpoint is `MODEL_ENDPOINT`, else `HF_ENDPOINT`, else https://huggingface.co/ (common.cpp
  `common_get_model_endpoint`); the token is `-hft`, else `HF_TOKEN`;
- the commit is the `main` branch's (else the first valid branch) from `/api/models/REPO/refs`; the
  files are `/api/models/REPO/tree/COMMIT?recursive=true`, in the Hub's order;
- a `preset.ini` at the root makes the repo a preset: only that file is downloaded;
- `-hff FILE` names the file exactly; else `find_best_model`: the first model file (not mmproj,
  imatrix, mtp-, eagle3-, dflash-, dspark-) whose path matches `TAG[.-]` (case-insensitive), the tag
  given or `Q4_K_M` then `Q8_0`, a split set only by its first part; with no tag, the first model file;
- a split model (`-0000i-of-0000N.gguf`) is every file with the same prefix and count;
- and beside the model (`sidecars`): the best `mmproj` file unless `--no-mmproj`/`-mm`/`-mmu`, and
  for each `--spec-type draft-mtp|draft-eagle3|draft-dflash|draft-dspark` the best `mtp-`/`eagle3-`/
  `dflash-`/`dspark-` file (download.cpp `find_best_sibling`).
The Hub calls go through `huggingface_hub` (listing, auth, errors); URLs are llama.cpp's
`ENDPOINT/REPO/resolve/COMMIT/PATH`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tui.core.config.endpoint import DEFAULT_ENDPOINT, endpoint  # noqa: F401 (re-exported)
from tui.core.options import reader
from tui.core.options.settings import Settings, effective_spec_types
from tui.core.remote.errors import quoted

DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.I)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.I)
_NOT_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
#: The most parts of a split model mtp-tune reads headers of. llama.cpp's own limit is the u16
#: `split.count` (llama-model-loader.cpp; the names' 5 digits allow 99999), which is no sane number of
#: header reads; 256 parts at the Hub's 50 GB per file is 12.8 TB, six times the largest model
#: released (1T parameters in BF16, 2 TB in about 45 parts).
MAX_SPLIT_PARTS = 256


def split_repo_tag(spec: str) -> tuple[str, str]:
    """`user/model[:quant]` -> (repo, tag); ValueError as llama.cpp's `common_download_split_repo_tag`."""
    parts = spec.split(":")
    tag = parts[-1] if len(parts) > 1 else ""
    repo = parts[0]
    if len(repo.split("/")) != 2 or not all(repo.split("/")):
        raise ValueError(f"-hf {spec!r}: expected <user>/<model>[:quant], e.g. unsloth/Qwen3.6-35B-A3B-GGUF:Q4_K_M")
    return repo, tag


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int


@dataclass(frozen=True)
class SplitInfo:
    prefix: str  # the tag included
    tag: str  # upper case, "" when the name has none
    index: int
    count: int


def split_info(path: str) -> SplitInfo | None:
    """llama.cpp's `get_gguf_split_info`; None for a name that does not end in .gguf."""
    if not path.endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return SplitInfo(prefix, t.group(1).upper() if t else "", index, count)


def is_model_file(path: str) -> bool:
    """llama.cpp's `gguf_filename_is_model`: a .gguf that is no projector, imatrix or draft sidecar."""
    name = path.rsplit("/", 1)[-1]
    return path.endswith(".gguf") and not any(k in name for k in _NOT_MODEL)


def _first_part(path: str) -> bool:
    info = split_info(path)
    return info is None or info.count <= 1 or info.index == 1


def find_best_model(files: list[HubFile], tag: str) -> HubFile | None:
    """llama.cpp's `find_best_model`."""
    for t in [tag] if tag else list(DEFAULT_TAGS):
        pattern = re.compile(re.escape(t) + "[.-]", re.I)
        for f in files:
            if is_model_file(f.path) and pattern.search(f.path) and _first_part(f.path):
                return f
    if not tag:
        for f in files:
            if is_model_file(f.path) and _first_part(f.path):
                return f
    return None


def split_files(files: list[HubFile], first: HubFile) -> list[HubFile]:
    """llama.cpp's `get_split_files`: every part of `first`'s split set (same prefix and count), by
    part number (llama.cpp keeps the listing's order, which the Hub sorts by path: the same order)."""
    info = split_info(first.path)
    if info is None or info.count <= 1:
        return [first]
    same = [f for f in files if (i := split_info(f.path)) and i.count == info.count and i.prefix == info.prefix]
    return sorted(same, key=lambda f: split_info(f.path).index)  # type: ignore[union-attr]


def resolve_files(files: list[HubFile], repo: str, tag: str, hf_file: str = "") -> list[HubFile]:
    """The model file(s) llama-server's `-hf REPO[:TAG] [-hff FILE]` downloads; ValueError naming the
    problem (a preset repo, no such file, no GGUF at all) and the GGUF files there are."""
    ggufs = [f.path for f in files if f.path.endswith(".gguf")]
    available = ("; the repo has: " + ", ".join(quoted(g, 80) for g in ggufs[:12]) + (" ..." if len(ggufs) > 12 else "")) \
        if ggufs else "; the repo has no .gguf file"
    if any(f.path == "preset.ini" for f in files):
        raise ValueError(f"{repo} holds a preset.ini: llama-server downloads only that file and loads what it names; "
                         "plan the model it names instead.")
    if hf_file:
        hit = next((f for f in files if f.path == hf_file), None)
        if hit is None:
            raise ValueError(f"-hff {quoted(hf_file)!r} is not in {repo}{available}.")
        return split_files(files, hit)
    best = find_best_model(files, tag)
    if best is None:
        what = f"no GGUF file matching the quant {tag!r}" if tag else "no GGUF model file"
        raise ValueError(f"{repo} has {what}{available}.")
    return split_files(files, best)


@dataclass(frozen=True)
class Variant:
    """One downloadable model of a repo: a single file or a split set (one row of `variants`)."""

    tag: str  # e.g. Q4_K_M ("" when the name carries none)
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def path(self) -> str:
        return self.files[0].path


def variants(files: list[HubFile]) -> list[Variant]:
    """Every model in the listing, a split set as one variant (its first part names it)."""
    out = []
    for f in files:
        if is_model_file(f.path) and _first_part(f.path):
            info = split_info(f.path)
            out.append(Variant(info.tag if info else "", tuple(split_files(files, f))))
    return out


def listing_from_tree(items: list[Any]) -> list[HubFile]:
    """The Hub's tree JSON -> HubFiles, in the Hub's order, read as llama.cpp's `get_repo_files` reads
    it (hf-cache.cpp): an entry that is not a `file` object with a string path is skipped, and so is
    a path that would leave the repo (absolute, or through `..`). The size is the LFS object's, else
    the entry's; one that is no whole number >= 0 skips the entry (the header read checks it)."""
    out = []
    for it in items:
        if not isinstance(it, dict) or it.get("type") != "file" or not isinstance(it.get("path"), str):
            continue
        path = it["path"]
        if not path or path.startswith("/") or ".." in path.split("/"):
            continue
        lfs = it.get("lfs")
        size = lfs.get("size") if isinstance(lfs, dict) and "size" in lfs else it.get("size")
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            out.append(HubFile(path, size))
    return out


# ---- sidecars: what `-hf` downloads beside the model (download.cpp:530-770, arg.cpp:361-420, 620-680) ----

#: (role, the keyword its file's path must contain, the --spec-type that asks for it), in the order
#: `common_download_get_hf_plan` resolves them (download.cpp:746-760); mmproj needs no spec type
SIDECAR_KINDS: tuple[tuple[str, str, str], ...] = (
    ("mmproj", "mmproj", ""), ("mtp", "mtp-", "draft-mtp"), ("dflash", "dflash-", "draft-dflash"),
    ("eagle3", "eagle3-", "draft-eagle3"), ("dspark", "dspark-", "draft-dspark"),
)
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class SidecarOptions:
    """`common_download_opts.download_*` as `common_models_handler_init` sets them (arg.cpp:394-401) for
    llama-server: mmproj unless `--no-mmproj`, `-mm` or `-mmu`; a draft kind per `--spec-type`.
    `draft_elsewhere`: `--spec-draft-hf` names a draft repo, whose files then become the draft and the
    main repo's draft sidecars are skipped (arg.cpp:620-630, `had_spec_url`); `draft_given`: `-md`, so
    a downloaded draft sidecar is not the draft (arg.cpp:640)."""

    mmproj: bool = True
    spec_types: tuple[str, ...] = ()
    draft_elsewhere: bool = False
    draft_given: bool = False

    def wants(self, role: str) -> bool:
        if role == "mmproj":
            return self.mmproj
        spec = next(t for r, _, t in SIDECAR_KINDS if r == role)
        return spec in self.spec_types and not self.draft_elsewhere


def sidecar_options(settings: Settings) -> SidecarOptions:
    """Which sidecars a llama-server launched with `settings` asks for (the reader's last-wins values)."""
    extra = list(settings.extra_args)
    mm_path = reader.value(extra, "--mmproj") or ""
    mm_url = reader.value(extra, "--mmproj-url") or ""
    return SidecarOptions(mmproj=not settings.no_mmproj and not mm_path and not mm_url,
                          spec_types=tuple(effective_spec_types(list(settings.spec_type))),
                          draft_elsewhere=bool(reader.value(extra, "--spec-draft-hf")),
                          draft_given=bool(reader.value(extra, "--spec-draft-model")))


@dataclass(frozen=True)
class Sidecar:
    """A file llama-server's `-hf` downloads beside the model: `role` is mmproj, mtp, dflash, eagle3 or
    dspark; `is_draft`: it becomes the draft model (`params.speculative.draft.mparams.path`)."""

    role: str
    path: str
    size: int
    is_draft: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        # in_plan: mtp-tune's planner counts neither a projector nor a separate draft model (yet)
        return {"role": self.role, "path": self.path, "size": self.size, "is_draft": self.is_draft, "in_plan": False}


def _leading_int(s: str) -> int:
    """`std::stoi` of a string that starts with a digit: its leading digits."""
    m = _DIGITS.match(s)
    return int(m.group(0)) if m else 0


def extract_quant_bits(path: str) -> int:
    """download.cpp:502 `extract_quant_bits`: Q4_0 -> 4, F16 -> 16, BF16 -> 16; 0 without a tag digit."""
    info = split_info(path)
    tag = info.tag if info else ""
    pos = next((i for i, c in enumerate(tag) if c.isdigit()), -1)
    return 0 if pos < 0 else _leading_int(tag[pos:])


def find_best_sibling(files: list[HubFile], model: str, keyword: str, tag: str = "") -> HubFile | None:
    """download.cpp:534 `find_best_sibling`: among the .gguf files whose *path* contains `keyword`, and
    whose folder is the model's folder or one above it, the deepest; then (a tag given) one named
    `-TAG.`; then the closest quant bits to the tag's (else the model's). Ties: the listing's first."""
    tag_upper = tag.upper()
    if tag_upper:
        pos = next((i for i, c in enumerate(tag_upper) if c.isdigit()), -1)
        model_bits = 0 if pos < 0 else _leading_int(tag_upper[pos:])
    else:
        model_bits = extract_quant_bits(model)
    model_dirs = model.split("/")[:-1]
    best: HubFile | None = None
    best_depth, best_diff, best_exact = 0, 0, False
    for f in files:
        if not f.path.endswith(".gguf") or keyword not in f.path:
            continue
        sib_dirs = f.path.split("/")[:-1]
        if model_dirs[: len(sib_dirs)] != sib_dirs:  # std::mismatch must run through the sibling's folders
            continue
        depth = len(sib_dirs)
        diff = abs(extract_quant_bits(f.path) - model_bits)
        exact = bool(tag_upper) and f"-{tag_upper}." in f.path.upper()
        if (best is None or depth > best_depth or (depth == best_depth and exact and not best_exact)
                or (depth == best_depth and exact == best_exact and diff < best_diff)):
            best, best_depth, best_diff, best_exact = f, depth, diff, exact
    return best


def sidecars(files: list[HubFile], primary: str, tag: str, opts: SidecarOptions) -> list[Sidecar]:
    """The files llama-server's `-hf REPO[:TAG]` also downloads beside the model whose first file is
    `primary` (download.cpp:746-760: the projector by the model's quant only, the draft kinds by the
    tag too), in the order it queues them; a file already queued is downloaded once (arg.cpp:690)."""
    out: list[Sidecar] = []
    taken = set(f.path for f in split_files(files, HubFile(primary, 0))) if primary else set()
    draft_taken = opts.draft_given
    for role, keyword, _ in SIDECAR_KINDS:
        if not opts.wants(role) or (role == "mmproj" and not primary):
            continue
        hit = find_best_sibling(files, primary, keyword, "" if role == "mmproj" else tag)
        if hit is None:
            continue
        is_draft = role != "mmproj" and not draft_taken
        draft_taken = draft_taken or is_draft
        if hit.path not in taken:
            out.append(Sidecar(role, hit.path, hit.size, is_draft))
            taken.add(hit.path)
    return out


def resolve_url(repo: str, commit: str, path: str, ep: str | None = None) -> str:
    """llama.cpp's download URL: `ENDPOINT/REPO/resolve/COMMIT/PATH`."""
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo, path, revision=commit, endpoint=(ep or endpoint()).rstrip("/"))
