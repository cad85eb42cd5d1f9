"""The bench stage's derive(), report and plots on recorded samples.

The samples below are synthetic (numpy, seeded) in our own formats (samples.csv.gz,
summary.json, ceilings.json): no tool output is imitated.
"""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from evpack.reporting.blocks import Details, Figure, Md, to_markdown
from evpack.stages import bench as stage
from evpack.stages.base import ERROR, FAIL, PASS, SKIPPED, write_json, write_text
from evpack.timing import baselines, clocks, plots
from evpack.timing import ceilings as ceil_mod
from evpack.timing import summary as sm
from evpack.timing.suites import Shape

CANON = Shape(16, 16, 512, 64)
SWEEP = [Shape(32, 16, 256, 64), CANON, Shape(8, 16, 1024, 64)]
SHAPES = [CANON, Shape(16, 16, 512, 64, causal=True)] + [s for s in SWEEP if s != CANON]
SDPA_US = {"default": 50.0, "flash": 73.0, "efficient": 150.0, "cudnn": 50.0, "math": 400.0}
OURS_US = {"m64n64w4s1": 60.0, "m128n64w8s1": 55.0, "m32n64w2s1": 90.0}


def _times(rng, median, n=60):
    return (median + rng.normal(0.0, 0.004 * median, n)).clip(min=median * 0.9).tolist()


def make_stage(tmp_path, *, wrong=None, ours_status=None, sdpa_status=None, scale=1.0, name="pack", seed=1234):
    rng = np.random.default_rng(seed)
    d = tmp_path / name / "bench"
    d.mkdir(parents=True)
    records, samples = [], {}
    for shape in SHAPES:
        f = shape.S / 512 * (0.5 if shape.causal else 1.0)
        for mode in ("cold", "graph"):
            for cfg, us in OURS_US.items():
                st = (ours_status or {}).get((cfg, shape, mode), "ok")
                err = 5e-3 if wrong == (cfg, shape) else 4e-4
                r = sm.new_row("evpack", "wmma", cfg, shape, mode, must_run=True, status=st,
                               reason="" if st == "ok" else "boom", max_abs_err=err, err_bound=1.5e-3,
                               torch_err=2.5e-4, capture_ms=2.0 if mode == "graph" else None,
                               calls_per_sample=20 if mode == "graph" else 1)
                records.append(r)
                if st == "ok":
                    samples[r["key"]] = _times(rng, us * f * scale)
            for b, us in SDPA_US.items():
                st = (sdpa_status or {}).get((b, shape, mode), "ok")
                if b == "efficient" and shape.causal:
                    st = "unsupported"
                r = sm.new_row("sdpa", b, "", shape, mode, must_run=b == "default", status=st,
                               reason="" if st == "ok" else "No available kernel. Aborting execution.",
                               kernels=[f"synthetic_{b}_kernel"], ran=b)
                records.append(r)
                if st == "ok":
                    samples[r["key"]] = _times(rng, us * f)
    ceil = {"schema": 1, "measurements": {
        "bandwidth": {"work": 2.0 * 2**30, "unit": "bytes", "times_us": _times(rng, 511.0, 20)},
        "matmul_fp16": {"work": 2.0 * 8192**3, "unit": "flops", "times_us": _times(rng, 1500.0, 20)},
        "matmul_bf16": {"work": 2.0 * 8192**3, "unit": "flops", "times_us": _times(rng, 1520.0, 20)}}}
    meta = {"suite": "synthetic", "canonical": CANON.key, "primary_mode": "cold"}
    summary = sm.build_summary(meta, records, samples, ceil_mod.rates(ceil))
    reading = {"source": "pynvml", "sm_mhz": 1980, "max_sm_mhz": 1980, "reasons_mask": 0}
    write_json(d / "ceilings.json", ceil)
    write_json(d / "clocks.json", clocks.judge(reading, reading))
    write_json(d / "binary.json", {"module": "evpack._C", "path": "/x/_C.so", "sha256": "ab" * 32})
    write_json(d / "run.json", {"schema": 1, "suite": "synthetic", "device": {"name": "synthetic GPU"},
                                "gpu_seconds": 95.0, "cost_per_hour": 3.2, "cost_usd": 95.0 / 3600 * 3.2})
    sm.write_samples(d / sm.SAMPLES_FILE, records, samples)
    write_json(d / "summary.json", summary)
    return d


def report_md(d, out) -> str:
    """The bench section as report.md writes it (the hook returns report blocks)."""
    return to_markdown(stage.report_md(d, out))


def test_derive_pass_and_data(tmp_path):
    d = make_stage(tmp_path)
    out = stage.derive(d, d.parent)
    assert out.status == PASS, out.reason
    assert out.data["canonical_best"] == "wmma/m128n64w8s1"
    assert out.data["canonical_speedup"] == pytest.approx(50.0 / 55.0, rel=0.01)
    assert out.data["canonical_speedup_vs"]["flash"] == pytest.approx(73.0 / 55.0, rel=0.01)
    assert out.data["rows_unsupported"] == 2 and out.data["regressions"] is None
    assert out.data["so_sha256"] == "ab" * 32 and out.data["cost_usd"] == pytest.approx(0.0844, abs=1e-3)
    summary = json.loads((d / "summary.json").read_text())
    canon = next(r for r in summary["rows"] if r["key"] == f"evpack|wmma|m128n64w8s1|{CANON.key}|cold")
    assert canon["n"] == 60 and canon["rel_iqr"] < 0.01 and canon["bound"] == "compute"
    assert canon["tflops"] == pytest.approx(17.18e9 / 55e-6 / 1e12, rel=0.01)
    assert [e["rank"] for e in summary["leaderboard"]] == list(range(1, 9))


def test_derive_detects_tampered_samples(tmp_path):
    d = make_stage(tmp_path)
    lines = gzip.decompress((d / sm.SAMPLES_FILE).read_bytes()).decode().splitlines()
    parts = lines[5].split(",")
    parts[-1] = str(float(parts[-1]) * 3)
    lines[5] = ",".join(parts)
    (d / sm.SAMPLES_FILE).write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "disagrees" in out.reason


def test_derive_missing_and_corrupt_files(tmp_path):
    d = make_stage(tmp_path)
    (d / "ceilings.json").unlink()
    assert stage.derive(d, d.parent).status == ERROR
    d = make_stage(tmp_path, name="b")
    (d / sm.SAMPLES_FILE).write_bytes(gzip.compress(b"key,time_us\nx,1\n"))
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "corrupt" in out.reason
    write_text(d / sm.SAMPLES_FILE, "not gzip")
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "corrupt" in out.reason
    d = make_stage(tmp_path, name="c")
    write_text(d / "summary.json", "{")
    assert stage.derive(d, d.parent).status == ERROR


def test_wrong_result_fails(tmp_path):
    d = make_stage(tmp_path, wrong=("m64n64w4s1", CANON))
    out = stage.derive(d, d.parent)
    assert out.status == FAIL and "wrong after timing" in out.reason
    assert out.data["rows_fail"] == 2  # cold and graph rows of that config
    # the failing config never wins the leaderboard's canonical speedup
    assert out.data["canonical_best"] == "wmma/m128n64w8s1"
    assert "**FAIL**" in report_md(d, out)


def test_row_statuses_decide_stage(tmp_path):
    d = make_stage(tmp_path, ours_status={("m32n64w2s1", CANON, "graph"): "error"})
    assert stage.derive(d, d.parent).status == FAIL
    d = make_stage(tmp_path, name="b", sdpa_status={("default", CANON, "cold"): "error"})
    assert stage.derive(d, d.parent).status == ERROR
    d = make_stage(tmp_path, name="c", ours_status={(c, SWEEP[2], m): "skipped" for c in OURS_US
                                                   for m in ("cold", "graph")})
    out = stage.derive(d, d.parent)
    assert out.status == SKIPPED and "not measured" in out.reason


def test_report_and_figures(tmp_path):
    d = make_stage(tmp_path)
    written = plots.make_all(json.loads((d / "summary.json").read_text())["rows"], d, "cold")
    assert [p.name for p in written] == list(plots.FILES)  # sweep found: 3 S at B*S = 8192
    assert stage.figures(d) == [d / f for f in plots.FILES]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = stage.derive(d, d.parent)
    md = report_md(d, out)
    for needle in ("## Benchmark", "GPU time 95.0 s", "cost \\$0.08 at \\$3.20/h", "× default",
                   "Same-run ceilings", "not throttled", "unsupported", "No available kernel", "capture ms",
                   "synthetic_flash_kernel"):
        assert needle in md, needle
    # The leaderboard moved to the report's top (headline_md); the section points there.
    assert "| # | impl |" not in md and "at the top of this report" in md
    # The plots sit right after the per-shape table they belong to, each once; the other modes follow collapsed.
    blocks = stage.report_md(d, out)
    kinds = [type(b).__name__ for b in blocks]
    per_shape = next(i for i, b in enumerate(blocks) if isinstance(b, Md) and "### Per shape (cold mode)" in b.text)
    figs = [i for i, b in enumerate(blocks) if isinstance(b, Figure)]
    assert figs == list(range(per_shape + 1, per_shape + 1 + len(plots.FILES))), kinds
    assert [blocks[i].path for i in figs] == [f"bench/{name}" for name in plots.FILES]
    assert isinstance(blocks[figs[-1] + 1], Details) and blocks[figs[-1] + 1].summary == "Per shape (graph mode)"
    head = stage.headline_md(d, out)
    assert head.startswith("## Leaderboard at the canonical shape (B=16, H=16, S=512, D=64, dtype=fp16, non-causal")
    table_lines = [ln for ln in head.splitlines() if ln.startswith("|")]
    assert len(table_lines) == 2 + 8  # header, rule, 8 rows (3 configs of ours + 5 SDPA backends)
    assert "Best of ours: `wmma/m128n64w8s1`" in head


def _text_px(fig) -> float:
    """Height in pixels of the smallest visible text of a figure at the DPI the plots are saved with."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    return min(sizes) * plots.DPI / 72.0


@pytest.mark.parametrize("copies", [1, 6])
def test_plots_read_at_page_width(tmp_path, monkeypatch, copies):
    """Every plot is at most the page's content width (never scaled down) with text >= 10 px, also with
    the full suite's 24 shapes (more than SHAPES_PER_ROW: they wrap into panels)."""
    from evpack.reporting.report_html import png_size

    d = make_stage(tmp_path)
    rows = json.loads((d / "summary.json").read_text())["rows"]
    rows = [dict(r, shape=f"{r['shape']}#{i}") for i in range(copies) for r in rows]  # 4 or 24 shapes
    seen = {}
    real_save = plots._save

    def save(fig, path):
        seen[path.name] = _text_px(fig)
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", save)
    written = plots.make_all(rows, d, "cold")
    assert [p.name for p in written] == list(plots.FILES)
    for p in written:
        width, height = png_size(p.read_bytes())
        assert width == plots.PAGE_WIDTH_PX and 200 < height < 2000, (p.name, width, height)
        assert seen[p.name] >= plots.MIN_TEXT_PX, (p.name, seen[p.name])


def test_previous_pack_diff(tmp_path):
    old = make_stage(tmp_path, name="old", seed=1)
    new = make_stage(tmp_path, name="new", scale=1.10, seed=2)  # our rows 10% slower, SDPA unchanged
    write_json(new / "previous_summary.json", json.loads((old / "summary.json").read_text()))
    out = stage.derive(new, new.parent)
    assert out.status == PASS
    assert len(out.data["regressions"]) == len(SHAPES) * 2 * len(OURS_US)
    assert out.data["compare_counts"]["SLOWER"] == len(out.data["regressions"])
    md = report_md(new, out)
    assert "Against the previous pack" in md and "SLOWER" in md
    same = make_stage(tmp_path, name="same", seed=3)
    write_json(same / "previous_summary.json", json.loads((old / "summary.json").read_text()))
    out = stage.derive(same, same.parent)
    assert out.data["regressions"] == [] and out.data["compare_counts"]["SLOWER"] == 0


def test_clock_judgement_and_smi_parsing():
    ok = {"source": "nvidia-smi", "sm_mhz": 1980, "max_sm_mhz": 1980, "reasons_mask": 0}
    assert not clocks.judge(ok, ok)["throttled"]
    slow = dict(ok, sm_mhz=1500)
    j = clocks.judge(ok, slow)
    assert j["throttled"] and "1500 MHz" in j["reason"]
    hot = dict(ok, reasons_mask=0x20 | 0x1)  # sw thermal + idle
    j = clocks.judge(ok, hot)
    assert j["throttled"] and j["reasons"] == ["sw_thermal_slowdown"]
    assert not clocks.judge(ok, dict(ok, reasons_mask=0x1))["throttled"]  # idle is not throttling
    capped = clocks.judge(ok, dict(ok, sm_mhz=1965, reasons_mask=0x4))  # at the power limit, clock ~max
    assert not capped["throttled"] and capped["reasons"] == ["sw_power_cap"] and "sw_power_cap" in capped["reason"]
    assert clocks.judge(ok, dict(ok, sm_mhz=1600, reasons_mask=0x4))["throttled"]
    assert clocks.judge(ok, {"source": "none", "error": "x"})["reason"].startswith("clocks not readable")
    assert clocks.parse_smi_clocks("1980, 1980\n") == (1980, 1980)
    assert clocks.parse_smi_reasons("0x0000000000000004\n") == 4
    assert clocks.parse_smi_reasons("[N/A]") is None


def test_kernel_classification_and_bound():
    assert baselines.classify_kernels(["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma"]) == "cudnn"
    assert baselines.classify_kernels(["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>"]) == "flash"
    assert baselines.classify_kernels(["fmha_cutlassF_f16_aligned_64x64_rf_sm80(Params)"]) == "efficient"
    assert baselines.classify_kernels(["ampere_fp16_s16816gemm", "softmax_warp_forward"]) == "math"
    assert baselines.classify_kernels(["elementwise"]) == "unknown"
    assert baselines.error_bound(1e-4, "fp16") == pytest.approx(2e-4 + 2 ** -10)
