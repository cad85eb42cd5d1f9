"""The bench stage's derive(), report and plots on recorded samples.

The samples below are synthetic (numpy, seeded) in our own formats (samples.csv.gz,
summary.json, ceilings.json, content_probe.json, the canary records): no tool output is imitated.
make_stage writes a folder of the current summary schema (2: unique-content fields, the content probe, the
three canary records) or, with schema=1, one as packs made before issue 25 hold.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from evpack.packfs import read_stored, write_stored
from evpack.reporting import bench_sections
from evpack.reporting.blocks import Details, Figure, Md, to_markdown
from evpack.stages import bench as stage
from evpack.stages import bench_canaries
from evpack.stages.base import ERROR, FAIL, PASS, SKIPPED, write_json, write_text
from evpack.timing import baselines, clocks, content_probe, plots, roofline, uniqueness
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


DEVICE = {"name": "synthetic GPU", "sm_count": 132, "capability": "9.0"}
N = 60  # samples per row


def _content(mode: str, per: int) -> dict:
    method = uniqueness.PER_REPLAY if mode == "graph" else uniqueness.PER_CALL
    return {"content_uniqueness": method, "unique_calls": N * per}


def _probe_json(ratio: float = 1.0, broken: str | None = None) -> dict:
    """A content_probe.json of every config of ours: repeat/fresh = ratio (config `broken`: ratio 0.2)."""
    rng = np.random.default_rng(7)
    entries = []
    for cfg, us in OURS_US.items():
        fresh = (us + rng.normal(0, 0.003 * us, content_probe.PAIRS)).round(4)
        r = 0.2 if cfg == broken else ratio
        entries.append({"impl": "evpack", "variant": "wmma", "config": cfg, "fresh_us": fresh.tolist(),
                        "repeat_us": (fresh * r).round(4).tolist(), "error": None})
    return {"schema": content_probe.SCHEMA, "shape": CANON.key, "rule": content_probe.RULE.to_json(),
            "pairs": content_probe.PAIRS, "entries": entries}


def make_stage(tmp_path, *, wrong=None, ours_status=None, sdpa_status=None, scale=1.0, name="pack", seed=1234,
               schema=sm.SCHEMA):
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
                per = 20 if mode == "graph" else 1
                extra = {} if schema < 2 else dict(_content(mode, per), timed_checks=3, timed_mismatches=0,
                                                   timed_ref_checks=2, timed_ref_failures=0, timed_ref_worst=0.4,
                                                   drain_us_median=20.0, l2_violations=0, l2_error=None)
                r = sm.new_row("evpack", "wmma", cfg, shape, mode, must_run=True, status=st,
                               reason="" if st == "ok" else "boom", max_abs_err=err, err_bound=1.5e-3,
                               torch_err=2.5e-4, capture_ms=2.0 if mode == "graph" else None,
                               calls_per_sample=per, **extra)
                records.append(r)
                if st == "ok":
                    samples[r["key"]] = _times(rng, us * f * scale)
            for b, us in SDPA_US.items():
                st = (sdpa_status or {}).get((b, shape, mode), "ok")
                if b == "efficient" and shape.causal:
                    st = "unsupported"
                r = sm.new_row("sdpa", b, "", shape, mode, must_run=b == "default", status=st,
                               reason="" if st == "ok" else "No available kernel. Aborting execution.",
                               kernels=[f"synthetic_{b}_kernel"], ran=b, **({} if schema < 2 else _content(mode, 1)))
                records.append(r)
                if st == "ok":
                    samples[r["key"]] = _times(rng, us * f)
    ceil = {"schema": 1, "measurements": {
        "bandwidth": {"work": 2.0 * 2**30, "unit": "bytes", "times_us": _times(rng, 511.0, 20)},
        "matmul_fp16": {"work": 2.0 * 8192**3, "unit": "flops", "times_us": _times(rng, 1500.0, 20)},
        "matmul_bf16": {"work": 2.0 * 8192**3, "unit": "flops", "times_us": _times(rng, 1520.0, 20)}}}
    meta = {"suite": "synthetic", "canonical": CANON.key, "primary_mode": "cold"}
    reading = {"source": "pynvml", "sm_mhz": 1980, "max_sm_mhz": 1980, "reasons_mask": 0}
    physics = roofline.physics_of(DEVICE, 1980) if schema >= 2 else None
    summary = sm.build_summary(meta, records, samples, ceil_mod.rates(ceil), schema=schema, physics=physics)
    write_json(d / "ceilings.json", ceil)
    write_json(d / "clocks.json", clocks.judge(reading, reading))
    write_json(d / "binary.json", {"module": "evpack._C", "path": "/x/_C.so", "sha256": "ab" * 32})
    write_json(d / "run.json", {"schema": 1, "suite": "synthetic", "device": DEVICE if schema >= 2 else
                                {"name": "synthetic GPU"},
                                "gpu_seconds": 95.0, "cost_per_hour": 3.2, "cost_usd": 95.0 / 3600 * 3.2})
    if schema >= 2:
        write_json(d / stage.INTEGRITY_FILE, {"timed_checks": 0})
        write_json(d / content_probe.FILE, _probe_json())
        for c in bench_canaries.NAMES:
            write_json(d / bench_canaries.FILES[c], {"canary": c, "shape": CANON.key, "mode": "warm", "times_us": [],
                                                     "error": "not run in this synthetic stage"})
    sm.write_samples(d / sm.SAMPLES_FILE, records, samples)
    write_json(d / "summary.json", summary)
    return d


def report_md(d, out) -> str:
    """The bench section as report.md writes it (the hook returns report blocks)."""
    return to_markdown(bench_sections.report_md(d, out))


@pytest.mark.parametrize("schema", [1, 2])
def test_derive_pass_and_data(tmp_path, schema):
    d = make_stage(tmp_path, schema=schema)
    out = stage.derive(d, d.parent)
    assert out.status == PASS, out.reason
    assert out.data["canonical_best"] == "wmma/m128n64w8s1"
    assert out.data["canonical_speedup"] == pytest.approx(50.0 / 55.0, rel=0.01)
    assert out.data["canonical_speedup_vs"]["flash"] == pytest.approx(73.0 / 55.0, rel=0.01)
    assert out.data["rows_unsupported"] == 2 and out.data["regressions"] is None
    assert out.data["so_sha256"] == "ab" * 32 and out.data["cost_usd"] == pytest.approx(0.0844, abs=1e-3)
    summary = json.loads((d / "summary.json").read_text())
    canon = next(r for r in summary["rows"] if r["key"] == f"evpack|wmma|m128n64w8s1|{CANON.key}|cold")
    assert canon["n"] == 60 and canon["rel_iqr"] < 0.01 and canon["bound"] == ("compute" if schema == 1 else "mma")
    assert canon["tflops"] == pytest.approx(17.18e9 / 55e-6 / 1e12, rel=0.01)
    assert [e["rank"] for e in summary["leaderboard"]] == list(range(1, 9))
    assert summary["schema"] == schema
    if schema == 1:
        assert "pct_sol" not in canon and "timed_content_unique" not in canon
        return
    # the attention floor: 16 x 16 x 512^2 = 67.1 M exps at 16 x 132 x 1.98 GHz = 16.05 us (DESIGN.md: ~16 us)
    assert canon["floor_exp_us"] == pytest.approx(16 * 16 * 512 ** 2 / (16 * 132 * 1.98e9) * 1e6, rel=1e-12)
    assert canon["floor_exp_us"] == pytest.approx(16.05, abs=0.01)
    assert canon["floor_us"] == max(canon["floor_mma_us"], canon["floor_exp_us"], canon["floor_mem_us"])
    assert canon["pct_sol"] == pytest.approx(100 * canon["floor_us"] / canon["median_us"])
    assert canon["timed_content_unique"] is True and canon["content_uniqueness"] == uniqueness.PER_CALL
    assert out.data["physics"]["exp_per_s"] == pytest.approx(16 * 132 * 1.98e9)
    assert out.data["content_probe"] == {"kernels": 3, "flagged": []}


@pytest.mark.parametrize("suffix", [".xz", ".gz"])  # the form written now, and older packs' form
def test_derive_detects_tampered_samples(tmp_path, suffix):
    d = make_stage(tmp_path)
    lines = read_stored(d / sm.SAMPLES_FILE).decode().splitlines()
    (d / sm.SAMPLES_FILE).unlink()
    assert stage.derive(d, d.parent).status == ERROR  # no samples in any form
    write_stored(d / f"{sm.SAMPLES}{suffix}", ("\n".join(lines) + "\n").encode())
    assert stage.derive(d, d.parent).status != ERROR
    parts = lines[5].split(",")
    parts[-1] = str(float(parts[-1]) * 3)
    lines[5] = ",".join(parts)
    write_stored(d / f"{sm.SAMPLES}{suffix}", ("\n".join(lines) + "\n").encode())
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "disagrees" in out.reason


def test_derive_missing_and_corrupt_files(tmp_path):
    d = make_stage(tmp_path)
    (d / "ceilings.json").unlink()
    assert stage.derive(d, d.parent).status == ERROR
    d = make_stage(tmp_path, name="b")
    write_stored(d / sm.SAMPLES_FILE, b"key,time_us\nx,1\n")
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
    assert bench_sections.figures(d) == [d / f for f in plots.FILES]
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
    blocks = bench_sections.report_md(d, out)
    kinds = [type(b).__name__ for b in blocks]
    per_shape = next(i for i, b in enumerate(blocks) if isinstance(b, Md) and "### Per shape (cold mode)" in b.text)
    figs = [i for i, b in enumerate(blocks) if isinstance(b, Figure)]
    assert figs == list(range(per_shape + 1, per_shape + 1 + len(plots.FILES))), kinds
    assert [blocks[i].path for i in figs] == [f"bench/{name}" for name in plots.FILES]
    assert isinstance(blocks[figs[-1] + 1], Details) and blocks[figs[-1] + 1].summary == "Per shape (graph mode)"
    head = bench_sections.headline_md(d, out)
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


# -- schema 2: what derive requires of a bench folder written since issue 25 ---------------------------------

def _edit_records(d, fn):
    """Rewrite summary.json's records through fn(record) and rebuild it as the run would (same physics)."""
    written = json.loads((d / "summary.json").read_text())
    records = [fn(dict(r)) for r in sm.records_of(written)]
    samples = sm.read_samples(d / sm.SAMPLES_FILE)
    ceil = json.loads((d / "ceilings.json").read_text())
    meta = {k: written[k] for k in stage.META_KEYS}
    write_json(d / "summary.json", sm.build_summary(meta, records, samples, ceil_mod.rates(ceil),
                                                    physics=roofline.physics_of(DEVICE, 1980)))


def test_v2_rows_without_unique_content_are_errors(tmp_path):
    d = make_stage(tmp_path)
    key = f"evpack|wmma|m64n64w4s1|{CANON.key}|cold"
    _edit_records(d, lambda r: dict(r, unique_calls=N - 1) if r["key"] == key else r)
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "timed content not unique" in out.reason
    assert out.data["integrity"]["not_unique_rows"] == 1
    # the flag cannot be written by hand: derive recomputes it from the samples and the record
    d = make_stage(tmp_path, name="b")
    _edit_records(d, lambda r: dict(r, content_uniqueness=None) if r["key"] == key else r)
    data = json.loads((d / "summary.json").read_text())
    next(r for r in data["rows"] if r["key"] == key)["timed_content_unique"] = True
    write_json(d / "summary.json", data)
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "timed_content_unique" in out.reason


def test_v2_timed_outputs_off_their_reference_fail(tmp_path):
    d = make_stage(tmp_path)
    key = f"evpack|wmma|m128n64w8s1|{CANON.key}|graph"
    _edit_records(d, lambda r: dict(r, timed_ref_failures=1, timed_ref_worst=6.0) if r["key"] == key else r)
    out = stage.derive(d, d.parent)
    assert out.status == FAIL and "off the fp32 reference" in out.reason


def test_v2_content_probe_decides_and_must_cover_every_timed_kernel(tmp_path):
    d = make_stage(tmp_path)
    write_json(d / content_probe.FILE, _probe_json(broken="m32n64w2s1"))
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "content-keyed cache" in out.reason
    assert out.data["content_probe"]["flagged"] == ["wmma/m32n64w2s1"]
    assert out.data["integrity"]["content_cache_rows"] == len(SHAPES) * 2  # every row of that config
    probe = _probe_json()
    probe["entries"] = probe["entries"][1:]
    write_json(d / content_probe.FILE, probe)
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "not probed" in out.reason
    probe = _probe_json()
    probe["entries"][0] = dict(probe["entries"][0], fresh_us=[], repeat_us=[], error="RuntimeError: boom")
    write_json(d / content_probe.FILE, probe)
    assert "probe did not run" in stage.derive(d, d.parent).reason
    write_json(d / content_probe.FILE, dict(_probe_json(), rule=dict(content_probe.RULE.to_json(), max_ratio=0.0)))
    out = stage.derive(d, d.parent)  # a probe whose rule lets everything pass is refused
    assert out.status == ERROR
    (d / content_probe.FILE).unlink()
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "missing content_probe.json" in out.reason


def test_v2_requires_every_bench_canary_record(tmp_path):
    d = make_stage(tmp_path)
    out = stage.derive(d, d.parent)
    assert [c["name"] for c in out.data["canaries"]] == list(stage.CANARIES)
    assert not any(c["caught"] for c in out.data["canaries"])  # not run here: the canaries stage says so
    (d / bench_canaries.FILES[bench_canaries.TIMING_AWARE]).unlink()
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "canary_timing_aware.json" in out.reason


def test_a_new_folder_cannot_pass_as_an_old_one(tmp_path):
    """Rewriting summary.json as schema 1 (no content fields, the old floor) while the folder holds the files
    only schema 2 writes is refused: the rules follow what the writer made, not what the summary claims."""
    d = make_stage(tmp_path)
    written = json.loads((d / "summary.json").read_text())
    records = [{k: v for k, v in r.items() if k not in ("content_uniqueness", "unique_calls")}
               for r in sm.records_of(written)]
    ceil = json.loads((d / "ceilings.json").read_text())
    old = sm.build_summary({k: written[k] for k in stage.META_KEYS}, records, sm.read_samples(d / sm.SAMPLES_FILE),
                           ceil_mod.rates(ceil), schema=1)
    write_json(d / "summary.json", old)
    out = stage.derive(d, d.parent)
    assert out.status == ERROR and "summary.json is schema 1" in out.reason
