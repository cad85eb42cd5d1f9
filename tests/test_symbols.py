"""Mangled kernel names -> registry kernels. Symbols are taken from real ptxas output (fixtures)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from evpack import registry
from evpack.parsers import symbols

FIX = Path(__file__).parent / "fixtures"


def real_symbols() -> set[str]:
    out = set()
    for log in (FIX / "ptxas").glob("*.log"):
        out |= set(re.findall(r"Compiling entry function '([^']+)'", log.read_text()))
    return out


def test_fixture_symbols_are_real():
    assert "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE" in real_symbols()


@pytest.mark.parametrize("symbol,expected", [
    ("_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE",
     ("wmma", "m64n64w4s1", "fp16", 64, "tensor", False)),
    ("_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E13__nv_bfloat16Li64EEEvNS_9FwdParamsE",
     ("wmma", "m64n64w4s1", "bf16", 64, "tensor", False)),
    ("_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m32n64w2s1E6__halfLi64EEEvNS_9FwdParamsE",
     ("wmma", "m32n64w2s1", "fp16", 64, "tensor", False)),
    ("_ZN6evpack6scalar10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE",
     ("scalar", "m64n64w2s1", "fp16", 64, "scalar", False)),
    ("_ZN6evpack17canary_decoy_hmma10fwd_kernelINS0_14cfg_m64n64w2s1E6__halfLi64EEEvNS_9FwdParamsE",
     ("canary_decoy_hmma", "m64n64w2s1", "fp16", 64, "tensor", True)),
])
def test_identify_registry_kernels(symbol, expected):
    assert symbol in real_symbols()
    k = symbols.identify(symbol)
    assert (k.variant, k.config, k.dtype, k.head_dim, k.kind, k.canary) == expected
    assert k.key == expected[:4]


def test_unknown_symbols_are_none_with_a_reason():
    stray = "stray_kernel"
    probe = "_ZN6evpack11hgmma_probe10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
    assert {stray, probe} <= real_symbols()
    assert symbols.identify(stray) is None and "not of the form" in symbols.explain(stray)
    assert symbols.identify(probe) is None
    assert symbols.explain(probe) == "variant 'hgmma_probe' is not in the registry"
    # a registered variant with an unregistered config / head dim (edited from a real name)
    cfg = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m16n16w1s1E6__halfLi64EEEvNS_9FwdParamsE"
    assert symbols.identify(cfg) is None and "config 'm16n16w1s1' is not registered" in symbols.explain(cfg)
    d = "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi96EEEvNS_9FwdParamsE"
    assert symbols.identify(d) is None and "head dim 96" in symbols.explain(d)
    # canaries are instantiated for fp16 only
    bf = "_ZN6evpack17canary_decoy_hmma10fwd_kernelINS0_14cfg_m64n64w2s1E13__nv_bfloat16Li64EEEvNS_9FwdParamsE"
    assert symbols.identify(bf) is None and "dtype bf16" in symbols.explain(bf)
    assert symbols.explain("_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE") == ""


@pytest.mark.parametrize("bad", [
    "", "_Z9wg_kernelPfmm", "_ZN6evpack4wmma10bwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE",
    "_ZN6evpack4wmma10fwd_kernelINS0_14cfg_m64n64w4s1EfLi64EEEvNS_9FwdParamsE",  # float element type
    "_ZN6evpack4wmma10fwd_kernelINS0_99cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE",  # length past the end
    "_ZN6evpack4wmma10fwd_kernelINS0_8m64n64w4E6__halfLi64EEEvNS_9FwdParamsE",  # not a cfg_ struct
])
def test_parse_symbol_rejects_other_names(bad):
    assert symbols.parse_symbol(bad) is None


def test_cfg_declared_in_evpack_namespace():
    # Cfg = evpack::cfg_<...> mangles with S_ (evpack) instead of S0_ (evpack::<variant>)
    s = "_ZN6evpack4wmma10fwd_kernelINS_14cfg_m64n64w4s1E6__halfLi128EEEvNS_9FwdParamsE"
    assert symbols.parse_symbol(s) == symbols.ParsedSymbol("wmma", "m64n64w4s1", "fp16", 128)


def test_patched_registry_is_used(monkeypatch):
    probe = "_ZN6evpack11hgmma_probe10fwd_kernelINS0_14cfg_m64n64w4s1E6__halfLi64EEEvNS_9FwdParamsE"
    wmma = registry.get("wmma")
    extra = dataclasses.replace(wmma, name="hgmma_probe", source="tests/fixtures/sass/extra.cu")
    monkeypatch.setattr(registry, "VARIANTS", registry.VARIANTS + (extra,))
    k = symbols.identify(probe)
    assert k is not None and (k.variant, k.kind, k.canary) == ("hgmma_probe", "tensor", False)
    # or an explicit variant list
    assert symbols.identify(probe, variants=[extra]).variant == "hgmma_probe"
    assert symbols.identify(probe, variants=registry.CANARIES) is None
