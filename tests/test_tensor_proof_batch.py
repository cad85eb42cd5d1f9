"""One ncu process for several tensor_proof cells: the split of its output at the markers, and derive's check
that each cell's log is its share of the batch's output.

Every ncu output here is real: the tensor_proof folder of the newest full-suite reference pack (one H200; its
cells' logs are shares of one ncu process's output). A cell's log serves as a batch's output (a batch of one
cell, or its calls taken as two cells' calls), so no byte of tool output is written by hand.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import reference

from evpack.model import ERROR, PASS
from evpack.packfs import read_stored, write_stored
from evpack.parsers.ncu import parse_ncu_csv, split_at_markers, split_batch_log
from evpack.stages import tensor_proof

REF = reference.FULL or Path(__file__).resolve().parents[1] / "artifacts" / "reference" / "none"
TP = REF / "tensor_proof"
pytestmark = reference.needs("FULL")


def _log(name: str) -> str:
    return (TP / f"{name}.log").read_text(encoding="utf-8")


def _calls(name: str) -> int:
    return len(json.loads((TP / f"{name}.manifest.json").read_text(encoding="utf-8"))["calls"])


def test_a_batch_of_one_cell_is_its_output_byte_for_byte():
    text = _log("wmma")
    assert split_batch_log(text, [("wmma", _calls("wmma"))]) == {"wmma": text}


def test_two_shares_hold_every_launch_once_in_order():
    text = _log("mma")
    n = _calls("mma")
    shares = split_batch_log(text, [("first", 10), ("second", n - 10)])
    whole = parse_ncu_csv(text)
    a, b = parse_ncu_csv(shares["first"]), parse_ncu_csv(shares["second"])
    assert [k.launch_id for k in a + b] == [k.launch_id for k in whole]
    assert len(split_at_markers(a)) == 10 and len(split_at_markers(b)) == n - 10
    assert [k.values for k in a + b] == [k.values for k in whole]
    head = text.split('"ID","Process ID"')[0]
    assert shares["first"].startswith(head) and shares["second"].startswith(head)


def test_a_share_with_no_call_holds_no_launch():
    text = _log("scalar")
    shares = split_batch_log(text, [("none", 0), ("scalar", _calls("scalar"))])
    assert parse_ncu_csv(shares["none"]) == [] and shares["scalar"] == text


@pytest.mark.parametrize("shares, match", [
    ([("wmma", 23)], "marked calls"),
    ([("wmma", 25)], "marked calls"),
    ([("a", 12), ("a", 12)], "named twice"),
    ([("a", -1), ("b", 25)], "not a count"),
])
def test_shares_that_do_not_fit_the_output_are_refused(shares, match):
    with pytest.raises(ValueError, match=match):
        split_batch_log(_log("wmma"), shares)


def test_a_launch_before_the_first_marker_is_refused():
    text = _log("wmma")
    lines = text.splitlines()
    first = f'"{parse_ncu_csv(text)[0].launch_id}",'  # the first call's marker (a share's IDs go on from the batch's)
    first_marker = next(i for i, ln in enumerate(lines) if ln.startswith(first))
    no_first_marker = "\n".join(ln for ln in lines if not ln.startswith(first)) + "\n"
    assert first_marker > 0
    with pytest.raises(ValueError, match="before the first marker"):
        split_batch_log(no_first_marker, [("wmma", _calls("wmma") - 1)])


# ---- derive's check ----------------------------------------------------------------------------

def _as_batch(tmp_path: Path, names: tuple[str, ...] = ("wmma",)) -> Path:
    """The reference pack with the tensor_proof folder rewritten as if one batch had run `names` (each a batch
    of its own cell: its log is the batch's whole output), so derive must split it again."""
    pack = tmp_path / "pack"
    shutil.copytree(REF, pack)
    stage = pack / "tensor_proof"
    procs = json.loads((stage / "procs.json").read_text(encoding="utf-8"))
    for old in [*stage.glob("ncu-batch*.log"), *stage.glob("ncu-batch*.log.*")]:  # the pack's own batch output
        old.unlink()
    for rec in procs.values():  # every other cell as if its own process had run it: its log is whole
        rec.pop("batch", None)
    for k, name in enumerate(names):
        shutil.copyfile(stage / f"{name}.log", stage / f"ncu-batch{k}.log")
        cmd = [c for c in procs[name]["cmd"][:-4]] + ["--batch", name, "--manifest-dir", "x"]
        procs[name] = {**procs[name], "cmd": cmd, "batch": f"ncu-batch{k}"}
    (stage / "procs.json").write_text(json.dumps(procs), encoding="utf-8")
    batches = {f"ncu-batch{k}": {**procs[name], "cells": [name], "problem": None} for k, name in enumerate(names)}
    (stage / "batches.json").write_text(json.dumps(batches), encoding="utf-8")
    return stage


def test_a_batch_cell_derives_as_its_own_process_did(tmp_path):
    stage = _as_batch(tmp_path, ("wmma", "scalar", "canary_decoy_hmma"))
    before = tensor_proof.derive(TP, REF)
    after = tensor_proof.derive(stage, stage.parent)
    assert before.status == after.status == PASS
    assert after.data == before.data and after.reason == before.reason


def test_a_cell_log_edited_after_the_batch_is_refused(tmp_path):
    stage = _as_batch(tmp_path)
    log = stage / "wmma.log"
    text = log.read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if "hmma_src_fp16.sum" in ln and not ln.endswith('"0"'))
    value = row.rsplit(",", 1)[1]
    log.write_text(text.replace(row, row[: -len(value)] + '"1"'), encoding="utf-8")
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == ERROR and "wmma.log is not its share of ncu-batch0.log" in out.reason


@pytest.mark.parametrize("attack", ["no batch output", "batch names another cell", "batch is a path",
                                    "batch output edited", "no batch record", "batch record says unused",
                                    "batch record names other cells"])
def test_a_batch_record_that_does_not_give_the_cell_log_is_refused(tmp_path, attack):
    stage = _as_batch(tmp_path)
    procs = json.loads((stage / "procs.json").read_text(encoding="utf-8"))
    if attack == "no batch output":
        (stage / "ncu-batch0.log").unlink()
    elif attack == "batch names another cell":
        procs["wmma"]["cmd"][-3] = "mma"
    elif attack == "batch is a path":
        procs["wmma"]["batch"] = "../tensor_proof/ncu-batch0"
    elif attack.startswith("no batch record"):
        (stage / "batches.json").unlink()
    elif attack.startswith("batch record"):
        batches = json.loads((stage / "batches.json").read_text(encoding="utf-8"))
        if attack.endswith("unused"):
            batches["ncu-batch0"]["problem"] = "exited 3: profiling failed"
        else:
            batches["ncu-batch0"]["cells"] = ["wmma", "mma"]
        (stage / "batches.json").write_text(json.dumps(batches), encoding="utf-8")
    else:  # the batch's output loses the cell's last call: the count no longer fits
        text = (stage / "ncu-batch0.log").read_text(encoding="utf-8")
        last = parse_ncu_csv(text)[-2].launch_id  # the last call's marker
        keep = [ln for ln in text.splitlines() if not ln.startswith((f'"{last}",', f'"{last + 1}",'))]
        (stage / "ncu-batch0.log").write_text("\n".join(keep) + "\n", encoding="utf-8")
    (stage / "procs.json").write_text(json.dumps(procs), encoding="utf-8")
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == ERROR and out.reason.startswith("wmma: ")


def test_a_carried_cell_is_not_split_again(tmp_path):
    """A carried cell's batch output stays in its source pack (whose verify checked the split)."""
    stage = _as_batch(tmp_path)
    (stage / "ncu-batch0.log").unlink()
    procs = json.loads((stage / "procs.json").read_text(encoding="utf-8"))
    procs["wmma"]["carried_from"] = REF.name
    (stage / "procs.json").write_text(json.dumps(procs), encoding="utf-8")
    assert tensor_proof.derive(stage, stage.parent).status == PASS


def test_a_failed_batch_is_not_split_and_says_why(tmp_path):
    stage = tmp_path / "tensor_proof"
    stage.mkdir()
    shutil.copyfile(TP / "wmma.log", stage / "ncu-batch0.log")
    shutil.copyfile(TP / "wmma.manifest.json", stage / "wmma.manifest.json")
    rec = {"cmd": [], "env": {}, "returncode": 0, "timed_out": False, "duration_s": 1.0}
    assert tensor_proof._split_batch(stage, "ncu-batch0", rec, ["wmma"]) is None
    assert (stage / "wmma.log").read_text(encoding="utf-8") == _log("wmma")
    assert tensor_proof._split_batch(stage, "ncu-batch0", {**rec, "returncode": 9}, ["wmma"]).startswith("exited 9")
    assert tensor_proof._split_batch(stage, "ncu-batch0", {**rec, "timed_out": True}, ["wmma"]) == "timed out"
    why = tensor_proof._split_batch(stage, "ncu-batch0", rec, ["wmma", "mma"])  # mma's manifest is missing
    assert why.startswith("its output does not split into its cells")


# ---- run(): batches, their split, and the fallback to one process per cell --------------------------------

FAKE_NCU = '''#!{python}
"""Stand-in for ncu: replays the reference pack's real output of the one cell it is asked for."""
import shutil, sys
from pathlib import Path
args = sys.argv[1:]
ref = Path({ref!r})
if "--batch" in args:
    names = args[args.index("--batch") + 1].split(",")
    out = Path(args[args.index("--manifest-dir") + 1])
    if len(names) != 1 or names[0] in {fail!r}:
        sys.exit(3)
    shutil.copyfile(ref / (names[0] + ".manifest.json"), out / (names[0] + ".manifest.json"))
else:
    names = [args[args.index("--variant") + 1]]
    shutil.copyfile(ref / (names[0] + ".manifest.json"), args[args.index("--manifest") + 1])
sys.stdout.write((ref / (names[0] + ".log")).read_text())
'''


def _run_stage(tmp_path: Path, monkeypatch, fail: tuple[str, ...] = ()) -> Path:
    import sys

    from evpack.stages.base import StageContext

    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, ref=str(TP), fail=set(fail)), encoding="utf-8")
    ncu.chmod(0o755)
    monkeypatch.setattr(tensor_proof, "find_tool", lambda name: str(ncu))
    pack = tmp_path / "pack"
    pack.mkdir()
    for f in ("pack.json", "env.json"):
        shutil.copyfile(REF / f, pack / f)
    stage = pack / "tensor_proof"
    stage.mkdir()
    gpus = [{"index": i, "uuid": f"GPU-{i}"} for i in range(4)]  # four GPUs: a batch of one cell each
    tensor_proof.run(StageContext(pack, stage, Path(__file__).resolve().parents[1],
                                  {"variants": ["wmma"], "gpus": gpus}))
    return stage


def test_run_splits_each_batch_into_its_cells(tmp_path, monkeypatch):
    stage = _run_stage(tmp_path, monkeypatch)
    procs = json.loads((stage / "procs.json").read_text(encoding="utf-8"))
    assert list(procs) == ["wmma", *tensor_proof.CANARIES]
    assert [procs[n]["batch"] for n in procs] == [f"ncu-batch{k}" for k in range(4)]
    assert all("--batch" in procs[n]["cmd"] for n in procs)
    for n in procs:
        assert (stage / f"{n}.log").read_text(encoding="utf-8") == _log(n)
    for k in range(4):  # each batch's whole output is kept, inside xz
        assert not (stage / f"ncu-batch{k}.log").exists()
        assert read_stored(stage / f"ncu-batch{k}.log.xz").decode() == _log(list(procs)[k])
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == PASS, out.reason
    assert all(c["caught"] for c in out.data["canaries"])


def test_a_failed_batch_runs_its_cells_one_per_process(tmp_path, monkeypatch):
    stage = _run_stage(tmp_path, monkeypatch, fail=("canary_foreign_work",))
    procs = json.loads((stage / "procs.json").read_text(encoding="utf-8"))
    batches = json.loads((stage / "batches.json").read_text(encoding="utf-8"))
    assert "batch" not in procs["canary_foreign_work"] and "--variant" in procs["canary_foreign_work"]["cmd"]
    assert procs["wmma"]["batch"] == "ncu-batch0"
    failed = [b for b in batches.values() if b["problem"]]
    assert [b["cells"] for b in failed] == [["canary_foreign_work"]] and failed[0]["problem"].startswith("exited 3")
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == PASS, out.reason
    assert all(c["caught"] for c in out.data["canaries"])


def test_a_batch_output_changed_in_place_is_split_again(tmp_path):
    """The split is never answered from an earlier read of the same file: a batch output edited in place (same
    size, same inode, its modification time put back) after one derive no longer gives the cells' logs."""
    import os

    stage = _as_batch(tmp_path)
    assert tensor_proof.derive(stage, stage.parent).status == PASS
    batch = stage / "ncu-batch0.log"
    st = batch.stat()
    text = batch.read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if "hmma_src_fp16.sum" in ln and ln.endswith('"0"'))
    with open(batch, "r+", encoding="utf-8") as f:  # one digit, in place
        f.write(text.replace(row, row[:-2] + '1"', 1))
    os.utime(batch, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert batch.stat().st_size == st.st_size and batch.stat().st_ino == st.st_ino
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == ERROR and "wmma.log is not its share of ncu-batch0.log" in out.reason


@pytest.mark.parametrize("attack", ["edited inside xz", "plain beside xz", "truncated xz"])
def test_a_batch_output_kept_in_xz_is_checked_as_a_plain_one(tmp_path, attack):
    """The stored form changes nothing: the split is of the inflated bytes, and a second copy, an edit or a broken
    stream is refused as it is for a plain output."""
    stage = _as_batch(tmp_path)
    plain, stored = stage / "ncu-batch0.log", stage / "ncu-batch0.log.xz"
    text = plain.read_text(encoding="utf-8")
    write_stored(stored, text.encode())
    plain.unlink()
    assert tensor_proof.derive(stage, stage.parent).status == PASS
    if attack == "edited inside xz":
        row = next(ln for ln in text.splitlines() if "hmma_src_fp16.sum" in ln and ln.endswith('"0"'))
        write_stored(stored, text.replace(row, row[:-2] + '1"', 1).encode())
    elif attack == "plain beside xz":
        plain.write_text(text, encoding="utf-8")
    else:
        stored.write_bytes(stored.read_bytes()[:-40])
    out = tensor_proof.derive(stage, stage.parent)
    assert out.status == ERROR and out.reason.startswith("wmma: ")
