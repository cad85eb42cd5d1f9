"""What every report of a pack shows, read from the pack's files only (no renderer here)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..jsonio import read_json
from ..model import StageOutcome
from ..stages.order import STAGE_ORDER

ICON = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIPPED"}
MARKER = "<!-- evidence-pack -->"  # first line of report.md and comment.md: the sticky comment's key


@dataclass(frozen=True)
class PackView:
    """A pack's metadata and stage outcomes, loaded once for every report."""

    dir: Path
    pack: dict
    env: dict
    outcomes: dict[str, StageOutcome]  # in pipeline order, only the stages the pack lists

    @property
    def pack_id(self) -> str:
        return self.pack["pack_id"]

    @property
    def label(self) -> str:
        return self.pack["label"]


def load_view(pack_dir: Path) -> PackView:
    """The stage outcomes as the pack holds them (outcome.json: what verify checks against the raw files)."""
    pj = read_json(pack_dir / "pack.json")
    env = read_json(pack_dir / "env.json")
    # the checked outcomes (written by evidence, compared with the raw files by verify): no re-derivation
    outcomes = {s: StageOutcome.from_json(read_json(pack_dir / s / "outcome.json")) for s in STAGE_ORDER
                if s in pj["stages"]}
    return PackView(pack_dir, pj, env, outcomes)


def cell(text: object, limit: int | None = None) -> str:
    """A table cell: one line, pipes escaped, optionally cut to `limit` characters."""
    t = " ".join(str(text).split())
    if limit is not None and len(t) > limit:
        t = t[: limit - 1].rstrip() + "…"
    return t.replace("|", "\\|")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def gate_table(pj: dict, reason_limit: int | None = None) -> list[str]:
    return table(["gate", "status", "reason"],
                 [[g, ICON[v["status"]], cell(v["reason"], reason_limit)] for g, v in pj["gates"].items()])


def headline(view: PackView) -> list[str]:
    """The verdict line and the labels: the first thing every report says."""
    return [f"# Evidence pack `{view.pack_id}`: **{view.label}**", "",
            f"Labels: {', '.join(f'`{x}`' for x in view.pack['labels'])}"]


def machine_line(env: dict) -> str:
    return (f"GPU: {env.get('gpu_name') or 'none'}; driver {env.get('driver_version') or '-'}; "
            f"torch {env.get('torch_version') or '-'} (CUDA {env.get('cuda_version') or '-'})")
