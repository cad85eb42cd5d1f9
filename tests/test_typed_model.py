"""The typed records: every committed pack (schema 1 and 2) and a pack written now (schema 3) loads into
today's types and writes back the same bytes; what a schema version requires is the version's, not the live
code's; and the count of string-key reads in python/evpack stays under its threshold."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, fake_pack

from evpack import model
from evpack.derivation import decision_view, view_differences
from evpack.jsonio import json_safe, read_json, write_json
from evpack.model import ModelError
from evpack.records import schema
from evpack.records.canary import CanaryRecord, MatrixRow, PlantedCanary, canary_records
from evpack.records.migrations import READERS, read_pack
from evpack.records.pack import ABSENT, PackRecord
from evpack.records.runner import RunnerRecord

REFERENCE = REPO / "artifacts" / "reference"
PACKS = sorted(p for p in REFERENCE.iterdir() if (p / "pack.json").is_file())
PACKAGE = REPO / "python" / "evpack"


def _same_bytes(tmp_path: Path, original: Path, obj) -> bool:
    """Whether `obj`, written as every pack file is written now (jsonio.json_text: large files without
    indentation) or as writers before that wrote every file (indented), is byte for byte the original file."""
    out = tmp_path / "out.json"
    write_json(out, obj)
    indented = json.dumps(json_safe(obj), indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    return original.read_bytes() in (out.read_bytes(), indented.encode("ascii"))


def test_the_committed_packs_cover_the_oldest_schema_and_todays():
    """The folder keeps four packs: the compatibility fixture (schema 1) and three of today's schema (3).
    Schema 2 packs are no longer committed (their reading is tested by migrations on schema 1 and 3)."""
    assert {read_json(p / "pack.json")["schema_version"] for p in PACKS} == {1, 3}
    # and the canary records of every form: sanitizer, build-time (kernels), oracle (observed first), bench
    stages = {f.parent.name for p in PACKS for f in p.glob("*/outcome.json") if read_json(f)["data"].get("canaries")}
    assert {"sanitize", "ptxas", "sass", "correctness", "stability", "tensor_proof", "bench"} <= stages


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_pack_json_of_every_committed_pack_reads_into_todays_record_and_writes_back_the_same_bytes(pack, tmp_path):
    rec = read_pack(read_json(pack / "pack.json"))
    assert isinstance(rec, PackRecord) and rec.pack_id == pack.name
    assert rec.extra == ()  # every field of every committed pack is a field of today's record
    assert _same_bytes(tmp_path, pack / "pack.json", rec.to_json())
    if rec.schema_version == 1:  # schema 1 wrote neither: they stay absent, never invented
        assert rec.requirement is ABSENT and rec.signing is ABSENT and not rec.has_signing_record
    else:
        assert rec.has_signing_record


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_runner_records_of_every_committed_pack_write_back_the_same_bytes(pack, tmp_path):
    files = sorted(pack.glob("*/runner.json"))
    assert files
    for f in files:
        assert _same_bytes(tmp_path, f, RunnerRecord.from_json(read_json(f)).to_json()), f


def test_a_pack_written_now_is_schema_3_and_its_records_write_back_the_same_bytes(tmp_path, fake_env):
    fake_env({})
    pack = fake_pack(tmp_path / "packs")
    rec = read_pack(read_json(pack / "pack.json"))
    assert rec.schema_version == schema.SCHEMA_VERSION == 3
    # the writer's order, signing last of the schema's own fields; `incremental` (evpack.incremental) is an optional
    # field the writer of now adds after them (schema-3 packs written before it lack it and read the same)
    assert list(rec.to_json()) == [*schema.CURRENT.pack_fields, "incremental"]
    assert _same_bytes(tmp_path, pack / "pack.json", rec.to_json())
    for f in sorted(pack.glob("*/runner.json")):
        assert _same_bytes(tmp_path, f, RunnerRecord.from_json(read_json(f)).to_json()), f


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_canary_records_of_every_committed_pack_write_back_the_same_bytes(pack, tmp_path):
    """Every stage's canary records, the liveness matrix and expected.json, through their records."""
    seen = 0
    for f in sorted(pack.glob("*/outcome.json")):
        obj = read_json(f)
        data = obj["data"]
        if data.get("canaries"):
            data = {**data, "canaries": [c.to_json() for c in canary_records(data)]}
            seen += len(data["canaries"])
        if data.get("matrix"):
            data = {**data, "matrix": [MatrixRow.from_json(r).to_json() for r in data["matrix"]]}
        assert _same_bytes(tmp_path, f, {**obj, "data": data}), f
    assert seen == sum(len(read_json(f)["data"].get("canaries") or []) for f in pack.glob("*/outcome.json"))
    expected = pack / "canaries" / "expected.json"
    if not expected.is_file():  # a pack whose canary stage was skipped (the bench-only pack)
        return
    assert _same_bytes(tmp_path, expected, [PlantedCanary.from_json(e).to_json() for e in read_json(expected)])


def test_a_canary_record_that_names_another_tool_is_not_this_gates():
    rec = CanaryRecord.from_json({"name": "canary_oob_write", "tool": None, "caught": True, "observed": "x"})
    assert not rec.fired_in("memcheck")
    assert CanaryRecord("c", True, "x").fired_in("memcheck") and not CanaryRecord("c", True, "x", tool="racecheck").fired_in("memcheck")
    with pytest.raises(ModelError):
        CanaryRecord.from_json({"name": "c"})


def test_fields_of_a_newer_writer_are_kept_in_order_and_do_not_break_reading():
    obj = read_json(PACKS[-1] / "pack.json")
    newer = {**obj, "incremental": {"carried": ["ptxas"]}, "timings": {**obj["timings"], "critical_path_s": 1.0}}
    rec = read_pack(newer)
    assert rec.get("incremental") == {"carried": ["ptxas"]}
    assert rec.get("no_such_field", "dflt") == "dflt"
    assert rec.to_json() == newer and list(rec.to_json()) == list(newer)


@pytest.mark.parametrize("bad,needle", [(None, "not an object"), ([], "not an object"),
                                        ({"schema_version": 99}, "99"), ({"schema_version": True}, "True"),
                                        ({"schema_version": "3"}, "'3'")])
def test_a_schema_this_code_does_not_know_is_named(bad, needle):
    with pytest.raises(ModelError, match=re.escape(needle)):
        read_pack(bad)


def test_every_known_schema_has_a_reader_and_a_spec():
    assert set(READERS) == set(schema.SCHEMAS) == set(schema.KNOWN_SCHEMAS)
    assert model.REQUIRED_GATES == {v: s.required_gates for v, s in schema.SCHEMAS.items()}


def test_required_gates_are_the_schemas_not_the_live_list(monkeypatch):
    """A gate added to today's code is not required of packs written before it."""
    before = {v: s.required_gates for v, s in schema.SCHEMAS.items()}
    monkeypatch.setattr(model, "GATE_ORDER", (*model.GATE_ORDER, "a_new_gate"))
    assert {v: s.required_gates for v, s in schema.SCHEMAS.items()} == before
    # the gates each committed pack holds are those its schema requires
    for p in PACKS:
        pj = read_json(p / "pack.json")
        assert tuple(pj["gates"]) == schema.SCHEMAS[pj["schema_version"]].required_gates


def test_todays_writer_writes_every_gate_todays_schema_requires():
    """Adding a gate to the code means a new schema version (records/schema.py), which this test asks for."""
    assert set(schema.CURRENT.required_gates) == set(model.GATE_ORDER)


def test_the_schema_module_holds_literal_values_and_imports_nothing_of_the_package():
    source = (PACKAGE / "records" / "schema.py").read_text()
    assert not re.search(r"^\s*(from \.|import evpack|from evpack)", source, re.M)


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_rewording_a_canary_text_does_not_break_an_older_pack(pack):
    """`expected` (and `observed`, `reason`) of a canary record are prose: verify compares `caught`."""
    spec = schema.SCHEMAS[read_json(pack / "pack.json")["schema_version"]]
    for f in sorted(pack.glob("*/outcome.json")):
        stored = read_json(f)["data"]
        text = json.dumps(stored)
        if '"canaries"' not in text:
            continue
        reworded = json.loads(re.sub(r'"(expected|observed|reason)": "[^"]*"', r'"\1": "reworded"', text))
        assert view_differences(decision_view(stored, spec.prose_keys), decision_view(reworded, spec.prose_keys)) == []
        # ... while a changed decision is still seen
        flipped = json.loads(text.replace('"caught": true', '"caught": false', 1))
        if flipped != stored:
            assert view_differences(decision_view(stored, spec.prose_keys), decision_view(flipped, spec.prose_keys))


# --- string-key reads: the issue's count --------------------------------------------------------------------
# `["key"]` and `.get("key")` (single or double quotes) per 1,000 lines of python/evpack (every line counted).
STRING_KEY_READ = re.compile(r"""\[\s*(["'])[^"'\n]*\1\s*\]|\.get\(\s*["']""")
# The issue's target is 50. Not reached yet: 131.6 before the typed records (2057 reads in 15,632 lines), 121.2
# after them (1953 in 16,112): pack.json, runner.json and canary records are typed end to end. 115.8 (2211 in
# 19,088) before the benchmark's views, 99.5 (1926 in 19,357) after them: the readers of summary.json, ab.json,
# run.json and clocks.json (the reports, the decision, `compare`) use records/bench.py; 94.6 (1852 in 19,573)
# with the SASS and PTXAS kernel rows' readers on records/sass.py and records/ptxas.py; 91.6 (1806 in 19,721)
# with the merged verdict's reports on records/merged.py; 90.2 (1780 in 19,734) with the dispatch table's
# generator reading the benchmark through records/bench.py; 88.6 (1750 in 19,743) with the plots too; 86.9
# (1716 in 19,742) with the summary's leaderboard and canonical speedup; 87.1 (1744 in 20,023) after verify's
# new checks of the oracles' raw correctness and stability rows (their verdicts recomputed from the numbers),
# which read those rows as dicts. 14.8 (332 in 22,433) with every stage's data, the oracles' raw rows, the A/B,
# the provenance statement, merged verdicts, incremental evidence, dispatch_table.json, env.json, procs.json and
# pack.json's timings read through records/ views (the issue's target, 50, is met). What the regex still counts is
# mostly not a read of a record: environment variables, regex match groups, list literals of one string
# (["..."]) and docstrings. The threshold is the number reached, rounded up, so that no change adds reads back.
THRESHOLD_PER_1000 = 15


def string_key_reads(root: Path = PACKAGE) -> tuple[int, int]:
    reads = lines = 0
    for p in sorted(root.rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        reads += len(STRING_KEY_READ.findall(text))
        lines += len(text.splitlines())
    return reads, lines


def test_the_counter_counts_what_the_issue_counts():
    sample = 'a["x"] + b.get("y") + c[\'z\'] + d.get(\'w\', 1) + e[k] + f.get(k) + g[0]\n'
    assert len(STRING_KEY_READ.findall(sample)) == 4


def test_string_key_reads_stay_under_the_threshold():
    reads, lines = string_key_reads()
    per_1000 = reads * 1000 / lines
    assert per_1000 <= THRESHOLD_PER_1000, (f"{reads} string-key reads in {lines} lines of python/evpack: "
                                            f"{per_1000:.1f} per 1,000 > {THRESHOLD_PER_1000}")
