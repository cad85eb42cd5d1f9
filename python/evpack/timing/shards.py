"""Where a bench stage folder keeps one GPU's files: the folder itself, or each shard of a benchmark sharded
over GPUs (stages/bench_shards.py writes that layout). Standard library only (verify, reports)."""
from __future__ import annotations

import json
from pathlib import Path

SHARDS_FILE = "shards.json"


def is_sharded(stage_dir: Path) -> bool:
    return (stage_dir / SHARDS_FILE).is_file()


def shard_dirs(stage_dir: Path) -> list[Path]:
    """The folders holding single-GPU bench files: the shards of a sharded run, else the stage folder.
    Raises OSError/ValueError/KeyError/TypeError on an unreadable shards.json."""
    if not is_sharded(stage_dir):
        return [stage_dir]
    shards = json.loads((stage_dir / SHARDS_FILE).read_text(encoding="utf-8"))["shards"]
    return [stage_dir / s["dir"] for s in shards]
