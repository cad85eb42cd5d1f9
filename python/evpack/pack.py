"""Assembling a pack: ids, the temporary folder, pack.json, index.json, atomic rename, `latest`."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import PACK_SCHEMA_VERSION, __version__
from .binary import sha256_file
from .gates import GATE_ORDER, derive_gates
from .labels import decide
from .provenance import UNINDEXED_FILES
from .runner import final_outcome
from .stages.base import StageOutcome, read_json, write_json
from .stages.order import STAGE_ORDER

INCOMPLETE_PREFIX = ".incomplete-"
PACK_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-z]{5,12}(-dirty)?$")
_TIMEY = re.compile(r"(time|duration|elapsed|utc|date|_s$|_ms$|_us$)")


class PackError(Exception):
    """Bad input for a pack operation: one line, non-zero exit."""


def load_pack_file(pack_dir: Path, name: str) -> dict:
    """A JSON file of a pack, or PackError naming what is wrong (missing pack, missing or corrupt file)."""
    if not pack_dir.is_dir():
        raise PackError(f"{pack_dir}: no such pack folder")
    try:
        return read_json(pack_dir / name)
    except FileNotFoundError:
        raise PackError(f"{pack_dir}: no {name}: not a finished pack") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PackError(f"{pack_dir}: {name} is corrupt: {exc}") from None


def new_pack_id(commit: str | None, dirty: bool | None, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    sha = (commit or "nogit")[:12]
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{sha}{'-dirty' if dirty else ''}"


def ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PackError(f"output folder {root} cannot be created: {exc.strerror}") from exc
    if not root.is_dir():
        raise PackError(f"output folder {root} is not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise PackError(f"output folder {root} is not writable")


def _strip_times(obj):
    if isinstance(obj, dict):
        return {k: _strip_times(v) for k, v in obj.items() if not _TIMEY.search(str(k))}
    if isinstance(obj, list):
        return [_strip_times(v) for v in obj]
    return obj


def content_digest(stages: dict[str, StageOutcome], gates: dict[str, StageOutcome], label: str) -> str:
    """Digest of what the pack says, timestamps and durations excluded (for zero-delta detection)."""
    body = {"stages": {k: _strip_times(v.to_json()) for k, v in stages.items()},
            "gates": {k: [v.status, v.reason] for k, v in gates.items()}, "label": label}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


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
            pj = read_json(p / "pack.json")
        except (OSError, json.JSONDecodeError):
            continue
        if commit and pj.get("git", {}).get("commit") == commit:
            return p
    return None


@dataclass(frozen=True)
class Derived:
    stages: dict[str, StageOutcome]
    gates: dict[str, StageOutcome]
    label: str
    labels: list[str]
    digest: str


def derive_all(pack_dir: Path, stage_names) -> Derived:
    stages = {name: final_outcome(name, pack_dir) for name in stage_names}
    gates = derive_gates(stages, pack_dir)
    bench = stages.get("bench")
    regression = bool(bench and bench.data.get("regressions"))
    label, labels = decide({g: gates[g].status for g in GATE_ORDER}, perf_regression=regression)
    return Derived(stages, gates, label, labels, content_digest(stages, gates, label))


def pack_json(*, pack_id: str, created: str, git, toolchain: dict, warnings: list[str], options: dict,
              derived: Derived, durations: dict[str, float], total_s: float, env: dict,
              zero_delta: dict | None) -> dict:
    build_bin = derived.stages.get("build")
    so_sha = build_bin.data.get("so_sha256") if build_bin else None
    bench = derived.stages.get("bench")
    return {
        "schema_version": PACK_SCHEMA_VERSION,
        "pack_id": pack_id,
        "created_utc": created,
        "tool_version": __version__,
        "git": {"commit": git.commit, "dirty": git.dirty, "error": git.error},
        "toolchain": toolchain,
        "python": {"executable": sys.executable, "version": ".".join(map(str, sys.version_info[:3]))},
        "warnings": warnings,
        "options": options,
        "stages": {n: {"status": o.status, "reason": o.reason, "duration_s": durations.get(n)}
                   for n, o in derived.stages.items()},
        "gates": {g: {"status": o.status, "reason": o.reason} for g, o in derived.gates.items()},
        "label": derived.label,
        "labels": derived.labels,
        "so_sha256": so_sha,
        "summary": {"gpu_name": env.get("gpu_name"),
                    "canonical_speedup": bench.data.get("canonical_speedup") if bench else None},
        "timings": {"total_s": total_s, "stages_s": durations},
        "content_digest": derived.digest,
        "zero_delta": zero_delta,
        "complete": True,
    }


def write_index(pack_dir: Path) -> dict:
    files = {}
    for p in sorted(pack_dir.rglob("*")):
        rel = p.relative_to(pack_dir).as_posix()
        if p.is_file() and p.name != "index.json" and rel not in UNINDEXED_FILES:  # they are written after it
            files[rel] = sha256_file(p)
    index = {"schema_version": PACK_SCHEMA_VERSION, "algorithm": "sha256", "files": files}
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
    write_json(stage_dir / "outcome.json", outcome.to_json())


def stage_names_of(pack: dict) -> list[str]:
    return [s for s in STAGE_ORDER if s in pack.get("stages", {})]
