"""The benchmark: suites, statistics, roofline, the GPU harness, SDPA baselines, compare, plots.

Pure modules (no GPU, importable anywhere): suites, stats, roofline, summary, compare,
plots (the report sections are evpack.reporting.bench_sections). GPU modules (import torch at call time, run only inside the bench stage):
harness, ceilings, baselines, clocks. The stage itself is evpack.stages.bench.
"""
