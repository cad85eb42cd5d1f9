"""A config built for some of its variant's head dims only (wgmma's three-warpgroup m192n128w16s2: D=64): the
build, the symbol lookup, the Python API, the dispatch table, the docs and the compiler all hold it to them."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from evpack import api, buildgen, dispatch, docsgen, registry
from evpack.parsers import symbols

REPO = Path(__file__).resolve().parents[1]
WGMMA = registry.get("wgmma")
NARROW = next(c for c in WGMMA.configs if c.head_dims)


def test_the_narrow_config_serves_its_head_dims_only():
    assert NARROW.name == "m192n128w16s2" and NARROW.head_dims == (64,)
    assert NARROW.serves(64) and not NARROW.serves(128)
    assert NARROW in WGMMA.configs_for(64) and NARROW not in WGMMA.configs_for(128)
    assert WGMMA.configs_for(96) == ()  # a head dim the variant is not built for: no config
    grid = {(v.name, c.name, dt, d) for v, c, dt, d in registry.kernel_grid()}
    assert {("wgmma", NARROW.name, dt, 64) for dt in WGMMA.dtypes} <= grid
    assert not {k for k in grid if k[1] == NARROW.name and k[3] != 64}
    # the narrow configs are the three-warpgroup ones (with and without the tail split) and the one-warpgroup one,
    # all at D=64 only; every other config of every variant still serves every head dim of its variant
    narrow = [(v.name, c) for v in registry.variants(True) for c in v.configs if c.head_dims]
    assert [(v, c.name, c.head_dims) for v, c in narrow] == [("wgmma", "m192n128w16s2", (64,)),
                                                             ("wgmma", "m192n128w16s2t", (64,)),
                                                             ("wgmma", "m64n128w8s2", (64,))]
    assert all(c.serves(d) for v in registry.variants(True) for c in v.configs if not c.head_dims
               for d in v.head_dims)


def test_the_instantiation_files_hold_it_at_its_head_dims_only(tmp_path):
    buildgen.generate(REPO, tmp_path, registry.VARIANTS)
    for dt in WGMMA.dtypes:
        assert f"EVPACK_INSTANTIATE(wgmma, {NARROW.name}, 192, 128, 16, 2, " in (tmp_path / f"wgmma_{dt}_d64.cu").read_text()
        d128 = (tmp_path / f"wgmma_{dt}_d128.cu").read_text()
        assert NARROW.name not in d128 and "EVPACK_INSTANTIATE(wgmma, m128n128w12s2, " in d128


# The D=64 symbol is nvcc 13.0's for the fp16 instantiation (ptxas -v, "Compiling entry function"); the D=128 one is
# the same name with the template's head dim changed, a kernel the build never makes (static_assert in config.cuh).
SYMBOL_D64 = "_ZN6evpack5wgmma10fwd_kernelINS0_17cfg_m192n128w16s2E6__halfLi64EEEvNS_9FwdParamsENS0_7TmaMapsE"


def test_a_symbol_of_the_config_at_another_head_dim_is_not_a_registry_kernel():
    kid = symbols.identify(SYMBOL_D64)
    assert kid is not None and (kid.variant, kid.config, kid.dtype, kid.head_dim) == ("wgmma", NARROW.name, "fp16", 64)
    d128 = SYMBOL_D64.replace("Li64E", "Li128E")
    assert symbols.identify(d128) is None
    assert "head dim 128 is not registered for config 'm192n128w16s2'" in symbols.explain(d128)


def test_the_python_api_refuses_the_config_at_another_head_dim_in_one_line():
    q = torch.zeros(1, 1, 8, 128, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^config: wgmma/m192n128w16s2 is built for head dims \(64,\), not D=128$"):
        api.check_inputs(q, q, q, variant="wgmma", config=NARROW.name)
    q64 = torch.zeros(1, 1, 8, 64, dtype=torch.float16)  # at D=64 the check passes the config (and stops at the device)
    with pytest.raises(ValueError, match=r"^q: must be a CUDA tensor"):
        api.check_inputs(q64, q64, q64, variant="wgmma", config=NARROW.name)


def test_a_table_choice_of_the_config_for_another_head_dim_falls_back():
    table = json.loads(dispatch.TABLE_PATH.read_text(encoding="utf-8"))
    bad = json.loads(json.dumps(table))
    for c in (*bad["devices"][0]["choices"], *bad["devices"][0]["exact"]):
        c["variant"], c["config"] = "wgmma", NARROW.name
    h200 = {"device_name": bad["devices"][0]["name"], "capability": bad["devices"][0]["capability"], "sm_count": 132}
    assert dispatch.pick(bad, **h200, dtype="fp16", head_dim=64, causal=False, batch=16, heads=16, seqlen=512)[:2] == \
        ("wgmma", NARROW.name)
    assert dispatch.pick(bad, **h200, dtype="fp16", head_dim=128, causal=False, batch=16, heads=16, seqlen=512)[:2] == \
        dispatch.fallback()


def test_the_docs_name_the_head_dims_of_a_narrow_config():
    assert f"`{NARROW.name}` (D=64 only)" in docsgen.gen_variants(docsgen.Ctx(REPO, REPO / "docs"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_compiler_refuses_three_warpgroups_at_head_dim_128(tmp_path):
    src = tmp_path / "wgmma_m192_d128.cu"
    src.write_text('#include "csrc/variants/wgmma.cuh"\n'
                   "EVPACK_INSTANTIATE(wgmma, m192n128w16s2, 192, 128, 16, 2, __half, fp16, 128)\n")
    res = subprocess.run(["nvcc", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-I", str(REPO / "csrc/include"),
                          "-I", str(REPO), "-cubin", "-o", str(tmp_path / "x.cubin"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "three consumer warpgroups (160 registers each) fit head_dim 64 only" in res.stdout + res.stderr


def test_a_config_added_to_the_registry_later_asks_nothing_of_an_older_pack(monkeypatch):
    """The shortcut set is held to the configs of the pack's own build (build/kernels.json), not today's registry:
    every committed pack verifies with one more config registered for each variant it built."""
    import dataclasses

    import reference

    from evpack.verify import verify_pack

    later = tuple(dataclasses.replace(v, configs=v.configs + (registry.TileConfig("m64n32w2s1", 64, 32, 2, 1),))
                  for v in registry.VARIANTS)
    monkeypatch.setattr(registry, "VARIANTS", later)
    assert registry.get("wgmma").configs[-1].name == "m64n32w2s1"
    packs = [p for p in reference.PACKS if (p / "correctness" / "shortcut_inputs.json").is_file()]
    assert packs, "no reference pack with a shortcut set"
    for pack in packs:
        assert verify_pack(pack) == [], pack.name


def test_a_built_config_whose_shortcut_cases_are_gone_is_still_a_problem():
    """The class the registry-based rule caught stays caught: a config the build made, with its shortcut rows
    removed, leaves the set unproven."""
    import reference

    from evpack.jsonio import read_member_json
    from evpack.stages import correctness

    pack = next(p for p in reference.PACKS if (p / "correctness" / "shortcut_inputs.json").is_file())
    built = correctness.built_configs(pack)
    assert built and "m128n128w12s2" in built[("wgmma", "fp16", 64)]
    rows = {"wgmma": read_member_json(pack / "correctness", "wgmma.json")["rows"]}
    assert correctness.shortcut_problems(pack / "correctness", rows, built=built) == []
    dropped = {"wgmma": [r for r in rows["wgmma"] if not (r["set"] == "shortcut" and r["config"] == "m128n128w12s2")]}
    problems = correctness.shortcut_problems(pack / "correctness", dropped, built=built)
    assert problems and problems[0].startswith("wgmma: ") and "shortcut cases not checked" in problems[0]
