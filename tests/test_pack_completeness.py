"""No file of a pack can go missing unnoticed, even when the forger re-writes index.json.

A signature catches any change to a signed pack; an unsigned pack is only as strong as its
consistency. Every file is either read by a derivation or required: delete one file of each
kind (folder, extension, depth) from copies of the committed reference packs, re-hash the index
as a forger would, and `verify` must report the pack.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import reference

from evpack.verify import verify_pack

# The newest packs: the newest full suite (every folder), and one with a benchmark sharded over GPUs (its bench/
# folder: the shards); between them they hold every kind of file the older packs hold.
PACKS = reference.param(("FULL", reference.FULL), ("SHARDED", reference.SHARDED))
UNDER = {"FULL": "", "SHARDED": "bench/"}
UNINDEXED = ("index.json", "provenance.json", "provenance.json.sig")


def _kinds(pack: Path, under: str = "") -> list[str]:
    """One file per kind the pack holds: (top folder, extension, depth), and for JSON records their name,
    except the per-cell result files of a stage (named in its procs.json), which are one kind."""
    seen, out = set(), []
    for p in sorted(pack.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(pack).as_posix()
        if rel in UNINDEXED or not rel.startswith(under):
            continue
        name_parts = p.name.split(".")
        cell = name_parts[0] in _cells(p.parent) or (len(name_parts) > 2 and name_parts[1] in _cells(p.parent))
        named = p.suffix == ".json" and not cell
        kind = (rel.split("/")[0], p.suffix, rel.count("/"), cell, p.name if named else "")
        if kind not in seen:
            seen.add(kind)
            out.append(rel)
    return out


def _cells(folder: Path) -> set[str]:
    try:
        return set(json.loads((folder / "procs.json").read_text()))
    except (OSError, ValueError):
        return set()


def _delete_and_rehash(src: Path, rel: str, root: Path) -> Path:
    pack = root / src.name
    if pack.exists():
        shutil.rmtree(pack)
    shutil.copytree(src, pack)
    (pack / rel).unlink()
    index = json.loads((pack / "index.json").read_text())
    index["files"].pop(rel)
    (pack / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return pack


def _noticed_cheaply(pack: Path, rel: str) -> bool:
    """Whether a part of verify notices the deleted `rel` without the whole verify: the required-files rule
    (the stage's status read from its outcome.json), then the one stage derived alone and compared with its
    records. Sound as a shortcut: verify runs both parts (a derived status other than the recorded one is a
    mismatch of its own, and the same status meets the same rule)."""
    from evpack.derivation import final_outcome
    from evpack.model import StageOutcome
    from evpack.records.migrations import read_pack
    from evpack.records.schema import spec
    from evpack.verify import check_required_files, compare_stage, read_outcome

    stage = rel.split("/")[0]
    try:
        pj = read_pack(json.loads((pack / "pack.json").read_text()))
        stored = StageOutcome.from_json(json.loads((pack / stage / "outcome.json").read_text()))
    except (OSError, ValueError):
        return False  # the whole verify decides
    if stage not in pj.stages:
        return False
    sp = spec(pj.schema_version)
    if any(rel in p for p in check_required_files(pack, sp, {stage: stored}, None)):
        return True
    return bool(compare_stage(stage, final_outcome(stage, pack), pj, read_outcome(pack, stage), sp))


# Files older packs could lose unnoticed, with the reason; a pack made now is held to the rule for them
# (tests/test_required_files.py checks the rule that now requires each one).
OLDER_GAPS = {"build/build_tools.json": lambda pack: "build_tools" not in json.loads(
    (pack / "build" / "result.json").read_text())}  # a view for people, named by result.json since 2026-11-25


@pytest.mark.parametrize("src", PACKS)
def test_deleting_any_kind_of_file_is_noticed(src, tmp_path, request):
    under = UNDER[request.node.callspec.id]
    unnoticed = []
    for rel in _kinds(src, under):
        if rel in OLDER_GAPS and OLDER_GAPS[rel](src):
            continue
        pack = _delete_and_rehash(src, rel, tmp_path)
        if not _noticed_cheaply(pack, rel) and not verify_pack(pack):  # the whole verify when need be
            unnoticed.append(rel)
    assert unnoticed == [], f"deleted from {src.name} with index.json re-written, and it still verifies"


@reference.needs("FULL")
def test_the_scan_covers_the_plots_and_binary_records():
    kinds = _kinds(reference.FULL)
    assert any(k.endswith(".png") for k in kinds)
    assert {"correctness/binary.json", "sass/binary.json"} <= set(kinds)
    if reference.info(reference.FULL).ab:  # a pack made with --baseline or --self-check: the base's build record
        assert "bench/ab_build/result.json" in kinds


@reference.needs("COMPAT")
def test_deleted_plot_named(tmp_path):
    src = reference.COMPAT
    pack = _delete_and_rehash(src, "bench/sweep.png", tmp_path)
    assert "stage bench: missing raw file bench/sweep.png (a stage that decided keeps it)" in verify_pack(pack)
