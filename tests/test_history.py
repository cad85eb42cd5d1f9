"""evpack.history on synthetic packs (pack.json is this project's own format)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evpack import history

REPO = Path(__file__).resolve().parents[1]


def make_pack(root: Path, pack_id: str, *, commit: str, dirty: bool = False, label: str = "evidence:complete",
              gpu: str | None = "NVIDIA H200", speedup: float | None = None, summary: bool = True,
              env_gpu: str | None = None, bench_speedup: float | None = None) -> Path:
    d = root / pack_id
    d.mkdir(parents=True)
    pack = {"schema_version": 1, "pack_id": pack_id, "git": {"commit": commit, "dirty": dirty, "error": None},
            "label": label, "labels": [label], "stages": {}, "gates": {}}
    if summary:
        pack["summary"] = {"gpu_name": gpu, "canonical_speedup": speedup}
    (d / "pack.json").write_text(json.dumps(pack))
    if env_gpu is not None:
        (d / "env.json").write_text(json.dumps({"schema_version": 1, "gpu_name": env_gpu}))
    if bench_speedup is not None:
        (d / "bench").mkdir()
        (d / "bench" / "summary.json").write_text(json.dumps({"canonical_speedup": bench_speedup}))
    (d / "index.json").write_text("{}")
    return d


@pytest.fixture()
def artifacts(tmp_path: Path) -> Path:
    a = tmp_path / "artifacts"
    packs, ref = a / "packs", a / "reference"
    make_pack(packs, "20250103T120000Z-bbbbbbbbbbbb-dirty", commit="b" * 40, dirty=True, speedup=1.31)
    make_pack(packs, "20250101T080000Z-aaaaaaaaaaaa", commit="a" * 40, label="evidence:partial", gpu=None,
              speedup=None)
    make_pack(packs, "20250104T000000Z-cccccccccccc", commit="c" * 40, label="evidence:failed",
              summary=False, env_gpu="NVIDIA H100 80GB HBM3", bench_speedup=0.92)
    make_pack(ref, "20250102T000000Z-dddddddddddd", commit="d" * 40, speedup=1.05)
    make_pack(ref, "20250103T120000Z-bbbbbbbbbbbb-dirty", commit="b" * 40, dirty=True, speedup=1.31)
    (packs / "latest").symlink_to("20250104T000000Z-cccccccccccc")
    (packs / ".20250105T000000Z-eeeeeeeeeeee.partial").mkdir()  # a fetch in progress: not a pack
    (packs / "20250105T000000Z-ffffffffffff").mkdir()  # no pack.json: not a pack
    return a


def test_collect_orders_dedupes_and_reads_every_field(artifacts: Path):
    rows = history.collect(artifacts)
    assert [r.pack_id for r in rows] == [
        "20250101T080000Z-aaaaaaaaaaaa",
        "20250102T000000Z-dddddddddddd",
        "20250103T120000Z-bbbbbbbbbbbb-dirty",
        "20250104T000000Z-cccccccccccc",
    ]
    a, d, b, c = rows
    assert (a.source, a.gpu, a.label, a.speedup, a.short_commit) == ("packs", None, "evidence:partial", None,
                                                                     "aaaaaaaaaaaa")
    assert (d.source, d.gpu, d.speedup) == ("reference", "NVIDIA H200", 1.05)
    assert (b.source, b.dirty, b.speedup, b.short_commit) == ("packs+reference", True, 1.31, "bbbbbbbbbbbb+dirty")
    # No summary in pack.json: the GPU from env.json, the speedup from bench/summary.json.
    assert (c.gpu, c.speedup, c.label) == ("NVIDIA H100 80GB HBM3", 0.92, "evidence:failed")
    assert all(r.error is None for r in rows)


def test_table_shows_commit_gpu_label_and_speedup(artifacts: Path):
    table = history.format_table(history.collect(artifacts)).splitlines()
    assert table[0].split() == ["pack", "where", "commit", "gpu", "label", "speedup", "vs", "SDPA"]
    assert "aaaaaaaaaaaa" in table[1] and "- (no GPU)" in table[1] and table[1].endswith("-")
    assert "bbbbbbbbbbbb+dirty" in table[3] and "NVIDIA H200" in table[3] and table[3].endswith("1.31x")
    assert "evidence:failed" in table[4] and table[4].endswith("0.92x")


def test_unreadable_pack_is_listed_with_its_error(tmp_path: Path):
    d = tmp_path / "artifacts" / "packs" / "20250101T000000Z-0123456789ab"
    d.mkdir(parents=True)
    (d / "pack.json").write_text("{ not json")
    (row,) = history.collect(tmp_path / "artifacts")
    assert row.error and "unreadable pack.json" in row.error and row.created == "20250101T000000Z"
    assert "?" in history.format_table([row])


def test_json_output_round_trips(artifacts: Path):
    data = json.loads(history.to_json(history.collect(artifacts)))
    assert data["schema_version"] == 1
    assert [p["speedup"] for p in data["packs"]] == [None, 1.05, 1.31, 0.92]


def test_plot_writes_a_png(artifacts: Path, tmp_path: Path):
    out = tmp_path / "plots" / "history.png"
    assert history.plot(history.collect(artifacts), out) == 3
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty.png"
    assert history.plot([], empty) == 0 and empty.stat().st_size > 0


def _main(args: list[str]) -> int:
    from evpack.cli import main

    return main(["history", "--no-verify", *args])


def test_main_exit_codes_and_output(artifacts: Path, tmp_path: Path, capsys):
    png = tmp_path / "trend.png"
    assert _main(["--artifacts", str(artifacts), "--plot", str(png)]) == 0
    out, err = capsys.readouterr()
    assert "20250103T120000Z-bbbbbbbbbbbb-dirty" in out and "1.31x" in out
    assert png.is_file() and "3 points" in err
    assert _main(["--artifacts", str(artifacts), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["packs"]) == 4
    assert _main(["--artifacts", str(tmp_path / "nowhere")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _main(["--artifacts", str(empty)]) == 0
    assert "no packs" in capsys.readouterr().out


def test_cli_entry_point(artifacts: Path):
    """`python -m evpack history` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    r = subprocess.run([sys.executable, "-m", "evpack", "history", "--artifacts", str(artifacts)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "20250104T000000Z-cccccccccccc" in r.stdout


def test_history_verifies_by_default_and_shows_nothing_a_forged_pack_claims(artifacts: Path, tmp_path: Path):
    """The synthetic packs of the fixture are pack.json files only: verified, none of them is a pack whose
    label or speedup may be shown; the committed reference packs verify and are listed with theirs."""
    env = {**os.environ}
    r = subprocess.run([sys.executable, "-m", "evpack", "history", "--artifacts", str(artifacts), "--format", "json"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["packs"]
    assert rows and all(p["label"] is None and p["speedup"] is None for p in rows)
    assert all("does not verify" in p["error"] or "unreadable" in p["error"] for p in rows)
    real = subprocess.run([sys.executable, "-m", "evpack", "history", "--format", "json"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    ref = [p for p in json.loads(real.stdout)["packs"] if p["source"] == "reference"]
    assert ref and all(p["error"] is None and p["label"] for p in ref)
    assert any(p["label"] == "evidence:complete" for p in ref)


def test_pack_json_of_other_types_and_values_is_listed_not_fatal(tmp_path: Path):
    """Every field of another type (or a non-finite speedup) shows as '-': read_pack never raises."""
    packs = tmp_path / "artifacts" / "packs"
    odd = {"pack_id": ["x"], "git": ["a"], "label": {"l": 1}, "summary": "s", "created_utc": 5}
    d = make_pack(packs, "20250101T000000Z-0123456789ab", commit="a" * 40)
    (d / "pack.json").write_text(json.dumps(odd))
    e = make_pack(packs, "20250102T000000Z-0123456789ab", commit="b" * 40)
    (e / "pack.json").write_text(json.dumps({"git": {"commit": 7, "dirty": "yes"}, "label": "l\nx",
                                             "summary": {"canonical_speedup": "nan", "gpu_name": ["g"]}}))
    rows = history.collect(tmp_path / "artifacts")
    assert [(r.pack_id, r.commit, r.dirty, r.label, r.gpu, r.speedup) for r in rows] == [
        ("20250101T000000Z-0123456789ab", None, None, None, None, None),
        ("20250102T000000Z-0123456789ab", "7", None, "l\\nx", None, None)]
    assert len(history.format_table(rows).splitlines()) == 3
    json.loads(history.to_json(rows))


@pytest.mark.parametrize("content,needle", [
    (b"[" * 100_000, "nested deeper"), (b'{"label": NaN}', "NaN is not JSON"),
    (b'{"label": "a", "label": "b"}', "duplicate key"), (b'{"label": "\xff"}', "not UTF-8")])
def test_a_pack_json_that_is_not_strict_json_is_one_row_with_its_problem(tmp_path: Path, content, needle):
    packs = tmp_path / "artifacts" / "packs"
    bad = make_pack(packs, "20250101T000000Z-0123456789ab", commit="a" * 40)
    (bad / "pack.json").write_bytes(content)
    make_pack(packs, "20250102T000000Z-bbbbbbbbbbbb", commit="b" * 40, speedup=1.2)
    rows = history.collect(tmp_path / "artifacts")
    assert needle in rows[0].error and rows[1].error is None and rows[1].speedup == 1.2


def test_a_pack_json_naming_another_pack_does_not_hide_it(tmp_path: Path):
    a = tmp_path / "artifacts"
    make_pack(a / "reference", "20250102T000000Z-dddddddddddd", commit="d" * 40, speedup=1.05)
    forged = make_pack(a / "packs", "20250101T000000Z-eeeeeeeeeeee", commit="e" * 40)
    pj = json.loads((forged / "pack.json").read_text())
    (forged / "pack.json").write_text(json.dumps(dict(pj, pack_id="20250102T000000Z-dddddddddddd")))
    rows = history.collect(a)
    assert [(r.pack_id, r.source, r.speedup) for r in rows] == [
        ("20250101T000000Z-eeeeeeeeeeee", "packs", None), ("20250102T000000Z-dddddddddddd", "reference", 1.05)]


def test_one_pack_that_does_not_verify_leaves_the_others_listed(tmp_path: Path, fake_env, capsys):
    """history with verification: a pack with a corrupt file is one row with its first problem, exit 0."""
    from conftest import FAKE, copy_pack, fake_pack

    from evpack.cli import main

    fake_env({})
    a = tmp_path / "artifacts"
    made = [fake_pack(a / "build") for _ in range(3)]  # one folder: three distinct pack ids
    good, bad = copy_pack(made[0], a / "packs"), copy_pack(made[1], a / "packs")
    (bad / "env.json").write_text("[" * 100_000)
    missing = copy_pack(made[2], a / "reference")
    (missing / "pack.json").unlink()  # index.json without pack.json: a broken pack, still listed
    shutil.rmtree(a / "build")
    capsys.readouterr()
    assert main(["history", "--artifacts", str(a), "--format", "json", "--stage-package", FAKE]) == 0
    out, err = capsys.readouterr()
    rows = {r["pack_id"]: r for r in json.loads(out)["packs"]}
    assert rows[good.name]["error"] is None and rows[good.name]["label"] == "evidence:complete"
    assert "does not verify" in rows[bad.name]["error"] and "env.json" in rows[bad.name]["error"]
    assert rows[bad.name]["label"] is None
    assert "unreadable pack.json" in rows[missing.name]["error"]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2 and bad.name in err
