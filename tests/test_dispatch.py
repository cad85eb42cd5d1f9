"""The default kernel: the dispatch table is generated from a committed reference pack, and picked from."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from evpack import api, dispatch, registry
from evpack.jsonio import read_member_json

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "artifacts" / "reference"
H200 = {"device_name": "NVIDIA H200", "capability": "9.0", "sm_count": 132}


def _committed() -> dict:
    return json.loads(dispatch.TABLE_PATH.read_text(encoding="utf-8"))


def test_committed_table_is_what_its_source_pack_generates():
    table = _committed()
    src = REFERENCE / table["source_pack"]
    assert src.is_dir(), f"the table's source pack {table['source_pack']} is not under artifacts/reference"
    regenerated = dispatch.generate_table(src)
    assert regenerated == table
    assert dispatch.table_text(regenerated) == dispatch.TABLE_PATH.read_text(encoding="utf-8")


def test_table_names_its_source_and_every_choice_is_a_registered_kernel():
    table = _committed()
    pj = json.loads((REFERENCE / table["source_pack"] / "pack.json").read_text(encoding="utf-8"))
    assert table["source_label"] == pj["label"] == "evidence:complete"
    assert table["source_commit"] == pj["git"]["commit"]
    (dev,) = table["devices"]
    assert (dev["name"], dev["capability"], dev["sm_count"]) == ("NVIDIA H200", "9.0", 132)
    assert dev["choices"]
    for c in dev["choices"]:
        var = registry.get(c["variant"])
        assert var.kind == "tensor" and var.config(c["config"]).name == c["config"]
        assert c["runner_up"] is None or c["geomean_us"] <= c["runner_up"]["geomean_us"]


def _pick_h200(table: dict, shape_row: dict) -> tuple[str, str]:
    return dispatch.pick(table, **H200, dtype=shape_row["dtype"], head_dim=shape_row["D"],
                         causal=bool(shape_row["causal"]), batch=shape_row["B"], heads=shape_row["H"],
                         seqlen=shape_row["S"])[:2]


def test_choices_agree_with_the_pack_benchmark():
    """Independent of the generator's scoring: on the pack's own device, a call of any shape the pack measured
    gets the kernel of ours with the smallest median there among the rows that ran ok within their error
    bound (at the canonical shape: the leaderboard's fastest), and every chosen row ran ok within its bound."""
    table = _committed()
    pack = REFERENCE / table["source_pack"]
    summary = read_member_json(pack / "bench", "summary.json")
    ours = [r for r in summary["leaderboard"] if r["impl"] == "evpack"]
    rows = [r for r in summary["rows"] if r["impl"] == "evpack" and r["mode"] == summary["primary_mode"]]
    canonical = next(r for r in rows if r["shape"] == summary["canonical"])
    assert _pick_h200(table, canonical) == (ours[0]["variant"], ours[0]["config"])
    for shape in {r["shape"] for r in rows}:
        good = [r for r in rows if r["shape"] == shape and r["status"] == "ok" and r["median_us"]
                and r["max_abs_err"] <= r["err_bound"]]
        fastest = min(r["median_us"] for r in good)
        chosen = _pick_h200(table, good[0])
        assert chosen in {(r["variant"], r["config"]) for r in good if r["median_us"] == fastest}, shape
    by_key = {(r["variant"], r["config"], r["shape"]): r for r in rows}
    for c in table["devices"][0]["choices"]:
        for shape in c["shapes"]:
            r = by_key[(c["variant"], c["config"], shape)]
            assert r["status"] == "ok" and r["max_abs_err"] <= r["err_bound"]


def test_a_measured_shape_is_not_left_to_its_class():
    """The class geomean can prefer a kernel that is fastest on none of its shapes; a shape the pack timed gets
    its own winner, on the pack's device only (another name or SM count: the class)."""
    table = json.loads(json.dumps(_committed()))
    shape = dict(dtype="fp16", head_dim=64, causal=False, batch=16, heads=16, seqlen=512)
    exact = next(e for e in table["devices"][0]["exact"]
                 if (e["dtype"], e["head_dim"], e["causal"], e["batch"], e["heads"], e["seqlen"]) ==
                 tuple(shape.values()))
    klass = _entry(table, "fp16", 64, False, "large")
    marked = ("mma", "m128n64w8s2")  # a kernel no class chooses, so the answer shows which entry served
    assert marked != klass
    exact["variant"], exact["config"] = marked
    variant, config, why = dispatch.pick(table, **H200, **shape)
    assert (variant, config) == marked and "measured shape" in why
    for device in (dict(H200, device_name="NVIDIA H100 80GB HBM3"), dict(H200, sm_count=114)):
        other = dispatch.pick(table, **device, **shape)  # B16 H16 is 'large' at 114 SMs too
        assert other[:2] == klass and "measured shape" not in other[2]
    # an entry whose kernel is not registered falls to the class, not to the registry default
    exact["config"] = "retired_config"
    assert dispatch.pick(table, **H200, **shape)[:2] == klass
    # a schema-3 table (no exact shapes) is still read: every call falls to its class
    exact["config"] = marked[1]
    table["schema_version"] = 3
    del table["devices"][0]["exact"]
    assert dispatch.pick(table, **H200, **shape)[:2] == klass


def test_schema_3_table_file_is_read(tmp_path):
    table = _committed()
    table["schema_version"] = 3
    for d in table["devices"]:
        del d["exact"]
    path = dispatch.write_table(table, tmp_path / "t.json")
    assert dispatch.load_table(path)["schema_version"] == 3
    table["schema_version"] = 2
    assert dispatch.load_table(dispatch.write_table(table, tmp_path / "t2.json")) is None


def _entry(table: dict, dtype: str, head_dim: int, causal: bool, size: str, seq: str = "long") -> tuple[str, str]:
    c = next(c for c in table["devices"][0]["choices"]
             if (c["dtype"], c["head_dim"], c["causal"], c["size"], c["seq"]) == (dtype, head_dim, causal, size, seq))
    return c["variant"], c["config"]


def test_pick_by_device_and_shape_class():
    table = _committed()
    pick = dispatch.pick
    # B16 H12 S512: a shape the pack did not time, so its class answers
    assert pick(table, **H200, dtype="fp16", head_dim=64, causal=False, batch=16, heads=12, seqlen=512)[:2] == \
        _entry(table, "fp16", 64, False, "large")
    # same capability, another name: the capability's row
    h100 = dict(H200, device_name="NVIDIA H100 80GB HBM3")
    assert pick(table, **h100, dtype="fp16", head_dim=128, causal=False, batch=16, heads=16, seqlen=512)[:2] == \
        _entry(table, "fp16", 128, False, "large")
    # no row for this device, or for this class (bf16 small: the pack has no such shape): the registry default
    a100 = dict(H200, device_name="NVIDIA A100", capability="8.0", sm_count=108)
    default = dispatch.fallback()
    assert default == ("wmma", "m64n64w4s1")
    assert pick(table, **a100, dtype="fp16", head_dim=64, causal=False, batch=16, heads=16, seqlen=512)[:2] == default
    variant, config, why = pick(table, **H200, dtype="bf16", head_dim=64, causal=False, batch=2, heads=8, seqlen=512)
    assert (variant, config) == default and why.startswith("registry default")
    assert pick(None, **H200, dtype="fp16", head_dim=64, causal=False, batch=16, heads=16, seqlen=512)[:2] == default


def test_size_class_boundary_is_the_sm_count():
    assert dispatch.size_class(1, 131, 132) == "small" and dispatch.size_class(2, 66, 132) == "large"


def test_short_sequences_are_a_class_of_their_own():
    """A tall query tile is mostly padding at S <= 256: the short shapes choose apart from the long ones."""
    assert dispatch.seq_class(dispatch.SHORT_SEQ) == "short" and dispatch.seq_class(dispatch.SHORT_SEQ + 1) == "long"
    assert dispatch.seq_class(dispatch.LONG_SEQ) == "long" and dispatch.seq_class(dispatch.LONG_SEQ + 1) == "very long"
    table = _committed()
    classes = {(c["dtype"], c["head_dim"], c["causal"], c["size"], c["seq"]) for c in table["devices"][0]["choices"]}
    assert ("fp16", 64, False, "large", "short") in classes and ("fp16", 64, False, "large", "long") in classes
    for seqlen, seq in ((128, "short"), (512, "long")):
        assert dispatch.pick(table, **H200, dtype="fp16", head_dim=64, causal=False, batch=48, heads=16,
                             seqlen=seqlen)[:2] == _entry(table, "fp16", 64, False, "large", seq)


def test_a_choice_naming_an_unknown_kernel_falls_back():
    table = _committed()
    bad = json.loads(json.dumps(table))
    for c in (*bad["devices"][0]["choices"], *bad["devices"][0]["exact"]):
        c["variant"] = "retired_variant"
    for heads in (16, 12):  # a measured shape and one left to its class
        assert dispatch.pick(bad, **H200, dtype="fp16", head_dim=64, causal=False, batch=16, heads=heads,
                             seqlen=512)[:2] == dispatch.fallback()


def test_only_a_complete_pack_with_a_benchmark_is_a_source(tmp_path):
    partial = sorted(p for p in REFERENCE.iterdir() if p.is_dir() and p.name != _committed()["source_pack"])
    for p in partial:
        label = json.loads((p / "pack.json").read_text(encoding="utf-8"))["label"]
        if label != "evidence:complete":
            with pytest.raises(dispatch.DispatchTableError, match="only an evidence:complete pack"):
                dispatch.generate_table(p)
    fake = tmp_path / "pack"
    fake.mkdir()
    shutil.copy(REFERENCE / _committed()["source_pack"] / "pack.json", fake / "pack.json")
    with pytest.raises(dispatch.DispatchTableError, match="summary.json: missing"):
        dispatch.generate_table(fake)


def test_load_table_ignores_an_unreadable_file(tmp_path):
    (tmp_path / "t.json").write_text("{not json")
    assert dispatch.load_table(tmp_path / "t.json") is None
    assert dispatch.load_table(tmp_path / "absent.json") is None
    assert dispatch.load_table()["source_pack"] == _committed()["source_pack"]


# ---- the API default ------------------------------------------------------------------------------

def test_explicit_variant_wins_and_config_alone_is_refused():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="config: 'm64n64w4s2' needs a variant"):
        api.flash_attention(q, q, q, config="m64n64w4s2")
    # without CUDA the default is the registry's, and the input check still names the problem
    assert api.default_kernel(q, causal=False) == dispatch.fallback()
    with pytest.raises(ValueError, match="q: must be a CUDA tensor"):
        api.flash_attention(q, q, q)


def test_choice_is_a_constant_under_torch_compile(monkeypatch):
    monkeypatch.setattr(api, "_device", lambda index: ("NVIDIA H200", "9.0", 132))
    table = _committed()
    assert api._choice(0, "fp16", 64, True, 16, 12, 512) == _entry(table, "fp16", 64, True, "large")
    fn = torch.compile(lambda x: x + len(api._choice(0, "fp16", 128, False, 16, 12, 512)[1]), fullgraph=True)
    assert fn(torch.zeros(2)).tolist() == [len(_entry(table, "fp16", 128, False, "large")[1])] * 2


def test_default_follows_a_regenerated_table(tmp_path, monkeypatch):
    """Re-pointing the table (as a new reference pack will) changes the default; nothing is hard-coded."""
    table = _committed()
    for c in (*table["devices"][0]["choices"], *table["devices"][0]["exact"]):
        c["variant"], c["config"] = "mma", "m128n64w8s2"
    path = dispatch.write_table(table, tmp_path / "t.json")
    monkeypatch.setattr(dispatch, "TABLE_PATH", path)
    monkeypatch.setattr(api, "_device", lambda index: ("NVIDIA H200", "9.0", 132))
    api._table.cache_clear()
    try:
        assert api._choice(0, "fp16", 64, False, 16, 16, 512) == ("mma", "m128n64w8s2")
        assert api._choice(0, "fp16", 64, False, 16, 12, 512) == ("mma", "m128n64w8s2")
    finally:
        api._table.cache_clear()
