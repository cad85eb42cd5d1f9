"""Rewrite a finished pack's large files into the storage forms the current writers use (sass dumps and
histogram.csv in xz, bench/summary.json in xz, oracle results over 64 KiB in xz, large JSON unindented, the Triton
build files in xz, every bench samples file as .csv.xz, ab.json over 64 KiB in xz), then
re-derive, rewrite the outcomes and pack.json and re-index: what a run of the current code writes, from a
pack made before it. Used by the storage tests and to measure pack sizes."""
from __future__ import annotations

import json
from pathlib import Path

from evpack import derivation, pack
from evpack.jsonio import read_json, write_json
from evpack.model import StageOutcome
from evpack.packfs import read_stored, write_stored
from evpack.provenance import attest
from evpack.provenance.statement import RunFacts
from evpack.records.pack import PackRecord
from evpack.stages import build_triton
from evpack.stages import correctness as correctness_stage
from evpack.stages import sass as sass_stage
from evpack.timing import ab_stage


def restore(pack_dir: Path) -> None:
    sdir = pack_dir / "sass"
    if (sdir / "run.json").is_file():
        rec = read_json(sdir / "run.json")
        for b in rec.get("binaries", []):
            old = b.get("dump")
            if old and old.endswith(".sass.gz"):
                new = old[:-3] + sass_stage.DUMP_SUFFIX
                write_stored(sdir / new, read_stored(sdir / old))
                (sdir / old).unlink()
                b["dump"] = new
        write_json(sdir / "run.json", rec)
        if (sdir / "histogram.csv").is_file():
            write_stored(sdir / sass_stage.HISTOGRAM_CSV, (sdir / "histogram.csv").read_bytes())
            (sdir / "histogram.csv").unlink()
    cdir = pack_dir / "correctness"
    for p in sorted(cdir.glob("*.json")) if cdir.is_dir() else ():
        correctness_stage.store_result(p)
    bdir = pack_dir / "bench"
    for folder in [bdir, *sorted(bdir.glob("shard*"))] if bdir.is_dir() else ():  # a shard's, as the top's
        for name in ("summary.json", "previous_summary.json"):
            if (folder / name).is_file():
                write_stored(folder / f"{name}.xz", (folder / name).read_bytes())
                (folder / name).unlink()
    tdir = pack_dir / "build" / "triton"
    for ext in sorted(tdir.iterdir()) if tdir.is_dir() else ():
        for p in sorted(ext.glob("*/*")):
            if p.is_file() and p.suffix not in (".xz", ".gz") and p.name.endswith(build_triton.KEPT):
                write_stored(p.with_name(p.name + build_triton.STORED_SUFFIX), p.read_bytes())
                p.unlink()
    for folder in [bdir, *sorted(bdir.glob("shard*"))] if bdir.is_dir() else ():
        for p in sorted(folder.glob("*samples.csv.gz")):
            write_stored(p.with_suffix(".xz"), read_stored(p))
            p.unlink()
        if (folder / "ab.json").is_file():
            ab_stage.write_ab(folder, json.loads((folder / "ab.json").read_text()))
    for p in pack_dir.rglob("*.json"):  # the writers' form of large JSON: without indentation
        if p.stat().st_size > 64 << 10 and p.parent.name != "correctness":
            write_json(p, json.loads(p.read_text()))
    rederive(pack_dir)


def rederive(pack_dir: Path) -> None:
    pj = read_json(pack_dir / "pack.json")
    derived = derivation.derive_all(pack_dir, pack.stage_names_of(PackRecord.from_json(pj)))
    for name, out in derived.stages.items():
        stored = read_json(pack_dir / name / "outcome.json")
        pack.outcome_file(pack_dir / name, StageOutcome(out.status, stored.get("reason", out.reason),
                                                        json.loads(json.dumps(out.data))))
    pj["content_digest"] = derived.digest
    write_json(pack_dir / "pack.json", pj)
    old = read_json(pack_dir / "provenance.json") if (pack_dir / "provenance.json").is_file() else None
    for f in ("index.json", "provenance.json", "provenance.json.sig"):
        (pack_dir / f).unlink(missing_ok=True)
    pack.write_index(pack_dir)
    if old is not None:  # the same run facts over the new index (unsigned: a signature binds the old bytes)
        pred = old["predicate"]
        run = RunFacts(command=tuple(pred["invocation"]["command"]), tree=pred["source"].get("tree"),
                       gpu_devices=pred["gpu"].get("devices"), ci=pred.get("ci"))
        assert attest.write_provenance(pack_dir, run, None) is None


def total_bytes(pack_dir: Path) -> int:
    return sum(p.stat().st_size for p in pack_dir.rglob("*") if p.is_file())
