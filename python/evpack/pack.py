"""Assembling a pack: ids, the temporary folder, pack.json, index.json, atomic rename, `latest`."""
from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .binary import sha256_file
from .derivation import Derived
from .errors import PackError
from .jsonio import read_json, write_json
from .model import SCHEMA_VERSION, UNINDEXED_FILES, ModelError, StageOutcome
from .records.migrations import read_pack
from .records.pack import ABSENT, GateEntry, GitRecord, PackRecord, StageEntry, Summary, ZeroDelta
from .stages.order import STAGE_ORDER
from .version import __version__

INCOMPLETE_PREFIX = ".incomplete-"
PACK_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-z]{5,12}(-dirty)?(-\d+)?$")


def load_pack_file(pack_dir: Path, name: str) -> dict:
    """A JSON file of a pack, or PackError naming what is wrong (missing pack, missing or corrupt file)."""
    if not pack_dir.is_dir():
        raise PackError(f"{pack_dir}: no such pack folder")
    try:
        return read_json(pack_dir / name)
    except FileNotFoundError:
        raise PackError(f"{pack_dir}: no {name}: not a finished pack") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise PackError(f"{pack_dir}: {name} is corrupt: {exc}") from None


def new_pack_id(commit: str | None, dirty: bool | None, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    sha = (commit or "nogit")[:12]
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{sha}{'-dirty' if dirty else ''}"


def reserve_pack_folder(root: Path, pack_id: str) -> tuple[str, Path]:
    """Create the run's `.incomplete-<id>` folder atomically. Two runs started in the same second
    get distinct ids: the second takes the suffix -2, the third -3, ..."""
    for n in range(1, 1000):
        pid = pack_id if n == 1 else f"{pack_id}-{n}"
        if (root / pid).exists():
            continue
        tmp = root / f"{INCOMPLETE_PREFIX}{pid}"
        try:
            tmp.mkdir()
        except FileExistsError:
            continue
        return pid, tmp
    raise PackError(f"{root}: no free pack id for {pack_id}")


def is_pack_folder(path: Path) -> bool:
    """A finished pack, an interrupted run's folder, or anything that holds a pack's own files."""
    return path.name.startswith(INCOMPLETE_PREFIX) or any((path / f).exists() for f in ("pack.json", "index.json"))


def inside_pack(path: Path) -> Path | None:
    """The pack folder that `path` is, or lies in, if any (resolved)."""
    path = path.resolve()
    for p in (path, *path.parents):
        if p.is_dir() and is_pack_folder(p):
            return p
    return None


def under_packs_folder(path: Path) -> Path | None:
    """The packs folder (one holding a `latest` link, or artifacts/packs, artifacts/reference) that `path`
    is or lies in: only an evidence run writes there."""
    path = path.resolve()
    for parent in (path, *path.parents):
        if (parent / "latest").is_symlink() or parent.name in ("packs", "reference") and parent.parent.name == "artifacts":
            return parent
    return None


def load_pack_record(pack_dir: Path) -> PackRecord:
    """pack.json of a pack, read by the reader of its schema version, with the fields a label needs, or
    PackError."""
    pj = load_pack_file(pack_dir, "pack.json")
    if not isinstance(pj, dict) or not {"pack_id", "label", "labels", "gates"} <= set(pj):
        raise PackError(f"{pack_dir}: pack.json lacks pack_id/label/labels/gates")
    try:
        return read_pack(pj)
    except ModelError as exc:
        raise PackError(f"{pack_dir}: {exc}") from None


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PackError(f"output folder {root} cannot be created: {exc.strerror}") from exc
    if not root.is_dir():
        raise PackError(f"output folder {root} is not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise PackError(f"output folder {root} is not writable")


def list_packs(root: Path) -> list[Path]:
    """Finished packs under root (never the incomplete ones), oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and not p.is_symlink() and PACK_ID_RE.match(p.name) and (p / "index.json").exists())


def previous_same_commit(root: Path, commit: str | None, exclude: str) -> Path | None:
    for p in reversed(list_packs(root)):
        if p.name == exclude:
            continue
        try:
            pj = PackRecord.from_json(read_json(p / "pack.json"))
        except (OSError, ValueError):  # ModelError is a ValueError
            continue
        if commit and pj.commit == commit:
            return p
    return None


def pack_record(*, pack_id: str, created: str, git, toolchain: dict, warnings: list[str], options: dict,
                derived: Derived, durations: dict[str, float], total_s: float, env: dict,
                zero_delta: dict | None, requirement: str | None = None, signing: Any = ABSENT,
                extra: tuple[tuple[str, Any], ...] = ()) -> PackRecord:
    """The pack.json of a finished run (signing: the key's record, None unsigned, ABSENT when the caller adds
    it later; extra: optional fields of other features, written after the known ones)."""
    return PackRecord(
        schema_version=SCHEMA_VERSION,
        pack_id=pack_id,
        created_utc=created,
        tool_version=__version__,
        git=GitRecord(git.commit, git.dirty, git.error),
        toolchain=toolchain,
        python={"executable": sys.executable, "version": ".".join(map(str, sys.version_info[:3]))},
        warnings=warnings,
        options=options,
        stages={n: StageEntry(o.status, o.reason, durations.get(n)) for n, o in derived.stages.items()},
        gates={g: GateEntry(r.status, r.reason) for g, r in derived.gates.items()},
        label=derived.label,
        labels=derived.labels,
        requirement=requirement,
        so_sha256=derived.facts.so_sha256,
        summary=Summary(env.get("gpu_name"), derived.facts.canonical_speedup),
        timings={"total_s": total_s, "stages_s": durations},
        content_digest=derived.digest,
        zero_delta=ZeroDelta(**zero_delta) if zero_delta is not None else None,
        complete=True,
        signing=signing,
        extra=extra,
    )


def write_index(pack_dir: Path) -> dict:
    """index.json: the SHA-256 of every file but those written after it. A pack holds regular files
    only: a symlink or a special file is refused here, before the pack is finished. A folder left
    empty (a stage that copied nothing into it) is removed: a pack's folders are those of its files,
    and verify refuses an empty one."""
    for d in sorted((p for p in pack_dir.rglob("*") if p.is_dir() and not p.is_symlink()),
                    key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    files = {}
    for p in sorted(pack_dir.rglob("*")):
        rel = p.relative_to(pack_dir).as_posix()
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise PackError(f"{rel}: a pack holds regular files only (symlink or special file)")
        if p.is_file() and rel not in UNINDEXED_FILES:
            files[rel] = sha256_file(p)
    index = {"schema_version": SCHEMA_VERSION, "algorithm": "sha256", "files": files}
    write_json(pack_dir / "index.json", index)
    return index


def finalize(tmp_dir: Path, root: Path, pack_id: str) -> Path:
    final = root / pack_id
    if final.exists():
        raise PackError(f"pack {final} already exists; refusing to overwrite it")
    tmp_dir.rename(final)
    link_tmp = root / ".latest.tmp"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    link_tmp.symlink_to(pack_id)
    link_tmp.replace(root / "latest")
    return final


def outcome_file(stage_dir: Path, outcome: StageOutcome) -> None:
    """<stage>/outcome.json: the stage's checked outcome (what the reports show)."""
    write_json(stage_dir / "outcome.json", outcome.to_json())


def stage_names_of(pack: PackRecord) -> list[str]:
    return [s for s in STAGE_ORDER if s in pack.stages]
