"""The bench summary, computed from raw samples: used by run() to write it and by derive() to check it.

A row's *record* fields (what happened: status, reason, errors, kernels) are written by
run(); its *statistics* (STAT_KEYS) are always a function of the raw samples CSV and the
ceilings, via build_rows(). derive() recomputes them and requires equality.

Row status: ok | fail (output wrong after timing) | unsupported (backend or variant cannot
run the shape, reason given) | skipped (VRAM guard, reason given) | error (raised).

Schema (summary.json "schema"; derive recomputes a summary with the rules of the schema it was written with):
  1  floor_us = max(FLOPs / matmul rate, bytes / copy bandwidth), bound "compute" / "memory"
  2  the attention floor (roofline.attention_floors): floor_mma_us, floor_exp_us, floor_mem_us, floor_us (the
     largest that bounds the mode), bound "mma" / "exp" / "memory", pct_sol (= pct_floor, 100 x floor / median);
     and timed_content_unique (uniqueness.timed_content_unique) on every timed row. The exp floor needs the
     run's Physics (run.json's device, clocks.json's clock).
"""
from __future__ import annotations

import math
from pathlib import Path

from ..jsonio import read_member_json, write_member_json
from ..records.bench import BenchRow, BenchSummary, bench_rows
from . import roofline
from .baselines import BACKENDS
from .stats import spread
from .suites import Shape, parse_shape
from .uniqueness import timed_content_unique

SCHEMA = 2
SCHEMAS = (1, 2)
OURS, SDPA = "evpack", "sdpa"
ROW_STATUSES = ("ok", "fail", "unsupported", "skipped", "error")
V1_STAT_KEYS = ("n", "median_us", "q1_us", "q3_us", "iqr_us", "rel_iqr", "ci_lo_us", "ci_hi_us", "ci_conf",
                "min_us", "max_us", "tflops", "gbps", "floor_us", "pct_floor", "bound", "speedup_vs")
V2_STAT_KEYS = ("floor_mma_us", "floor_exp_us", "floor_mem_us", "pct_sol", "timed_content_unique")
STAT_KEYS = V1_STAT_KEYS + V2_STAT_KEYS  # derived from samples + ceilings (+ physics): never trusted as written
# summary.json (and previous_summary.json) are written inside xz: a quick suite's summary is 0.73 MB of
# indented rows, 50 KB in xz; a full suite's three times that. Older packs hold the plain file: readers take
# either form (read_summary), never both (packfs.member refuses two forms of one file).
SUMMARY_FILE = "summary.json"
PREVIOUS_FILE = "previous_summary.json"
STORED_SUFFIX = ".xz"
# samples.csv (a full suite holds ~10^6 samples) is written inside xz: a quick pack's 206k samples (30 MB of CSV)
# are 0.92 MB in gzip, 0.74 MB in xz. Older packs hold samples.csv.gz. Readers find either through samples_file.
SAMPLES = "samples.csv"
SAMPLES_FILE = f"{SAMPLES}{STORED_SUFFIX}"  # the name a writer gives it
SAMPLE_COLUMNS = ("key", "impl", "variant", "config", "shape", "mode", "sample", "time_us")


def row_key(impl: str, variant: str, config: str, shape: str, mode: str) -> str:
    return f"{impl}|{variant}|{config}|{shape}|{mode}"


def new_row(impl: str, variant: str, config: str, shape: Shape, mode: str, *, must_run: bool,
            status: str = "ok", reason: str = "", **extra) -> dict:
    if status not in ROW_STATUSES:
        raise ValueError(f"row status must be one of {ROW_STATUSES}, got {status!r}")
    row = {"key": row_key(impl, variant, config, shape.key, mode), "impl": impl, "variant": variant,
           "config": config, "shape": shape.key, "B": shape.B, "H": shape.H, "S": shape.S, "D": shape.D,
           "dtype": shape.dtype, "causal": shape.causal, "mode": mode, "must_run": must_run,
           "status": status, "reason": reason}
    row.update(extra)
    return row


def _stats(row: dict, times_us: list[float] | None, rates: dict[str, float], schema: int,
           physics: roofline.Physics | None) -> dict:
    keys = STAT_KEYS if schema >= 2 else V1_STAT_KEYS
    if not times_us:
        return {k: None for k in keys}
    sp = spread(times_us)
    shape = parse_shape(row["shape"])
    flops, nbytes = roofline.shape_flops(shape), roofline.shape_bytes(shape)
    secs = sp.median / 1e6
    out = {"n": sp.n, "median_us": sp.median, "q1_us": sp.q1, "q3_us": sp.q3, "iqr_us": sp.iqr,
           "rel_iqr": sp.rel_iqr, "ci_lo_us": sp.ci_lo, "ci_hi_us": sp.ci_hi, "ci_conf": sp.ci_conf,
           "min_us": sp.min, "max_us": sp.max, "tflops": roofline.tflops(flops, secs),
           "gbps": roofline.gbps(nbytes, secs), "speedup_vs": {}}
    if schema < 2:
        roof = roofline.roofline(flops, nbytes, rates[f"matmul_{shape.dtype}"], rates["bandwidth"])
        return dict(out, floor_us=roof.floor_s * 1e6, pct_floor=roofline.pct_of_floor(roof.floor_s, secs),
                    bound=roof.bound)
    fl = roofline.attention_floors(shape, row["mode"], rates[f"matmul_{shape.dtype}"], rates["bandwidth"], physics)
    pct = roofline.pct_of_floor(fl.floor_s, secs)
    return dict(out, floor_us=fl.floor_s * 1e6, pct_floor=pct, bound=fl.bound, floor_mma_us=fl.mma_s * 1e6,
                floor_exp_us=None if fl.exp_s is None else fl.exp_s * 1e6, floor_mem_us=fl.mem_s * 1e6,
                pct_sol=pct, timed_content_unique=timed_content_unique(row, sp.n))


def build_rows(records: list[dict], samples: dict[str, list[float]], rates: dict[str, float], *,
               schema: int = SCHEMA, physics: roofline.Physics | None = None) -> list[dict]:
    """Records + raw samples + ceiling rates (+ the run's physics) -> full summary rows (statistics, speedups)."""
    rows = []
    for rec in records:
        row = {k: v for k, v in rec.items() if k not in STAT_KEYS}
        rows.append({**row, **_stats(row, samples.get(rec["key"]), rates, schema, physics)})
    views = bench_rows(rows)
    sdpa = {(r.shape, r.mode, r.variant): r.median_us for r in views
            if r.impl == SDPA and r.status == "ok" and r.median_us}
    return [row if r.median_us is None else dict(row, speedup_vs=_speedups(r, sdpa))
            for row, r in zip(rows, views, strict=True)]


def _speedups(row: BenchRow, sdpa: dict) -> dict[str, float]:
    """backend -> median(SDPA backend) / median(row) at the row's shape and mode (a backend's own row left out)."""
    out = {}
    for b in BACKENDS:
        base = sdpa.get((row.shape, row.mode, b))
        if base and not (row.impl == SDPA and row.variant == b):
            out[b] = base / row.median_us
    return out


def leaderboard(rows: list[dict], shape_key: str, mode: str) -> list[dict]:
    """Every implementation at one shape and mode, fastest first (ours and SDPA's backends)."""
    views = bench_rows(rows)
    graph = {(r.impl, r.variant, r.config): r.median_us for r in views if r.shape == shape_key and r.mode == "graph"}
    cands = sorted((r for r in views if r.shape == shape_key and r.mode == mode and r.median_us is not None),
                   key=lambda r: r.median_us)
    return [{"rank": i + 1, "impl": r.impl, "variant": r.variant, "config": r.config, "status": r.status,
             "median_us": r.median_us, "iqr_us": r.iqr_us, "tflops": r.tflops, "pct_floor": r.pct_floor,
             "speedup_vs_default": r.speedup("default"), "graph_median_us": graph.get((r.impl, r.variant, r.config))}
            for i, r in enumerate(cands)]


def best_ours(rows: list[dict], shape_key: str, mode: str) -> BenchRow | None:
    ours = [r for r in bench_rows(rows) if r.impl == OURS and r.shape == shape_key and r.mode == mode
            and r.status == "ok" and r.median_us is not None]
    return min(ours, key=lambda r: r.median_us) if ours else None


def canonical(rows: list[dict], shape_key: str, mode: str) -> dict:
    """canonical_speedup: best ok variant x config vs SDPA default at the canonical shape (None if absent)."""
    best = best_ours(rows, shape_key, mode)
    if best is None:
        return {"canonical_speedup": None, "canonical_best": None, "canonical_speedup_vs": {}}
    return {"canonical_speedup": best.speedup("default"), "canonical_best": f"{best.variant}/{best.config}",
            "canonical_speedup_vs": dict(best.speedup_vs)}


def recheck(row: dict) -> str:
    """Row status re-derived from its recorded error vs bound (our rows that ran)."""
    if row["impl"] != OURS or row["status"] not in ("ok", "fail"):
        return row["status"]
    recorded = BenchRow.from_json(row)
    err, bound = recorded.max_abs_err, recorded.err_bound
    if err is None or bound is None or not err <= bound:
        return "fail"
    return "ok"


def build_summary(meta: dict, records: list[dict], samples: dict[str, list[float]], rates: dict[str, float], *,
                  schema: int = SCHEMA, physics: roofline.Physics | None = None) -> dict:
    if schema not in SCHEMAS:
        raise ValueError(f"summary schema {schema!r} is not one of {SCHEMAS}")
    rows = build_rows(records, samples, rates, schema=schema, physics=physics)
    return summary_from_rows(meta, [dict(r, status=recheck(r)) for r in rows], schema=schema)


def summary_from_rows(meta: dict, rows: list[dict], *, schema: int = SCHEMA) -> dict:
    """summary.json from finished rows: the leaderboard and canonical speedup over them (also how the rows of
    a benchmark sharded over GPUs are put together: every row's statistics come from its own shard)."""
    run = BenchSummary.from_json(meta)
    return {"schema": schema, **meta, "rows": rows, "leaderboard": leaderboard(rows, run.canonical, run.primary_mode),
            **canonical(rows, run.canonical, run.primary_mode)}


def same_value(a, b) -> bool:
    """Equal as derived data: floats to 1e-9 relative (NaN equals NaN), containers element by element."""
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def differences(written: dict, recomputed: dict) -> list[str]:
    """Where the written summary disagrees with the one recomputed from the samples."""
    diffs = []
    mine, theirs = BenchSummary.from_json(recomputed), BenchSummary.from_json(written)
    wrows = {r.key: r.raw for r in theirs.rows}  # rows as records_of(written) took them: objects with a key
    for row in mine.rows:
        w, r = wrows.pop(row.key, None), row.raw
        if w is None:
            diffs.append(f"{row.key}: missing from summary.json")
            continue
        bad = [k for k in (*STAT_KEYS, "status") if not same_value(w.get(k), r.get(k))]
        if bad:
            diffs.append(f"{row.key}: {', '.join(bad)}")
    diffs += [f"{k}: in summary.json but not in the records" for k in wrows]
    for k in ("leaderboard", "canonical_speedup", "canonical_best"):
        if not same_value(written.get(k), recomputed.get(k)):
            diffs.append(k)
    if "canonical_speedup_vs" in written and not same_value(theirs.canonical_speedup_vs, mine.canonical_speedup_vs):
        diffs.append("canonical_speedup_vs")  # the report's "x flash, y cudnn": absent from the oldest packs
    return diffs


def summary_path(folder: Path, name: str = SUMMARY_FILE) -> Path:
    """The file that holds `name` (summary.json or previous_summary.json) in `folder`, in whichever stored
    form it is (folder/name when none is present); ValueError when two forms are present."""
    from ..packfs import member

    return member(Path(folder), name)


def has_summary(folder: Path, name: str = SUMMARY_FILE) -> bool:
    from ..packfs import stored_forms

    return bool(stored_forms(Path(folder), name))


def read_summary(folder: Path, name: str = SUMMARY_FILE) -> dict:
    """summary.json (or `name`) of a bench folder in its stored form. FileNotFoundError when absent,
    ValueError (jsonio.JsonFileError) when corrupt, stored twice or not inflatable."""
    return read_member_json(Path(folder), name)


def write_summary(folder: Path, summary: dict, name: str = SUMMARY_FILE) -> Path:
    """Write `summary` as `name` + STORED_SUFFIX (xz); returns the file written."""
    path = Path(folder) / f"{name}{STORED_SUFFIX}"
    write_member_json(path, summary)
    return path


def records_of(summary: dict) -> list[dict]:
    """The run-time record part of each written row (statistics dropped)."""
    return [{k: v for k, v in r.items() if k not in STAT_KEYS} for r in summary["rows"]]


def write_samples(path: Path, rows: list[dict], samples: dict[str, list[float]]) -> None:
    import pandas as pd

    by_key = {r.key: r for r in bench_rows(rows)}
    data = {c: [] for c in SAMPLE_COLUMNS}
    for key, times in samples.items():
        r = by_key[key]
        for i, t in enumerate(times):
            for c, v in zip(SAMPLE_COLUMNS, (key, r.impl, r.variant, r.config, r.shape, r.mode, i, t), strict=True):
                data[c].append(v)
    from ..packfs import write_stored

    text = pd.DataFrame(data, columns=list(SAMPLE_COLUMNS)).to_csv(index=False, lineterminator="\n")
    write_stored(path, text.encode("utf-8"))  # in the form path's suffix names (.xz now, .gz in older packs)


def samples_file(folder: Path, name: str = SAMPLES) -> Path:
    """The file holding samples member `name` (samples.csv, ab_samples.csv, ...) of `folder`: name.xz (packs of
    now), name.gz (older packs) or name (folder/name when none is present); ValueError when two forms are."""
    from ..packfs import member

    return member(Path(folder), name)


def has_samples(folder: Path, name: str = SAMPLES) -> bool:
    from ..packfs import stored_forms

    return bool(stored_forms(Path(folder), name))


def _sample_fields(lines: list[str], columns: list[str]):
    import csv

    """(key, sample, time_us) per data line. The file as written (SAMPLE_COLUMNS in order, sample and
    time_us last) takes a split from the right; any other layout goes through the csv module."""
    if tuple(columns) == SAMPLE_COLUMNS and SAMPLE_COLUMNS[-2:] == ("sample", "time_us"):
        keys: dict[str, str] = {}  # each distinct head (key, impl, ..., mode) parsed once
        for line in lines:
            head, sample, t = line.rsplit(",", 2)
            key = keys.get(head)
            if key is None:
                fields = next(csv.reader([head]))
                if len(fields) != 6:
                    raise ValueError(f"a sample line has {len(fields) + 2} fields, not 8: {line[:120]!r}")
                key = keys[head] = _key_of(fields, range(6), line)
            yield key, int(sample), float(t)
        return
    i_sample, i_time = columns.index("sample"), columns.index("time_us")
    at = [columns.index(c) for c in SAMPLE_COLUMNS[:6]]
    for r in csv.reader(lines):
        yield _key_of(r, at, r), int(r[i_sample]), float(r[i_time])


def _key_of(fields: list[str], at, line) -> str:
    """The key of a sample line whose impl, variant, config, shape and mode columns are the ones its key names
    (a sample is never counted for another row than the one its own line says it measured)."""
    key, *named = (fields[i] for i in at)
    if key != row_key(*named):
        raise ValueError(f"a sample line's key is not its impl|variant|config|shape|mode: {str(line)[:120]!r}")
    return key


def key_problems(records: list[dict]) -> list[str]:
    """Rows whose key is not row_key(impl, variant, config, shape, mode): samples are joined to rows by key."""
    views = [BenchRow.from_json(r) for r in records]
    return [f"{r.key}: the key does not name the row's impl, variant, config, shape and mode"
            for r in views if r.key != row_key(*(str(v) for v in (r.impl, r.variant, r.config, r.shape, r.mode)))]


def read_samples(path: Path) -> dict[str, list[float]]:
    """{key: times in sample order}; raises ValueError on a malformed file.

    `path` in any stored form (.xz, .gz, plain: packfs.read_stored). Standard library only (csv, lzma, gzip),
    so `verify` re-derives the benchmark on a bare Python;
    every field is read as text and time_us parsed by float(): an exact round trip.
    """
    import csv

    from .. import packfs  # inflated up to packfs' limit (read when called): a bomb is an error

    try:
        lines = packfs.read_stored(path, packfs.MAX_INFLATED_BYTES).decode("utf-8").splitlines()
    except packfs.CompressedFileError as exc:
        raise ValueError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    if not lines:
        raise ValueError(f"{path.name}: no header")
    try:
        columns = next(csv.reader(lines[:1]))
    except csv.Error as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"{path.name}: missing columns {missing}")
    out: dict[str, list[tuple[int, float]]] = {}
    try:
        for key, i, t in _sample_fields(lines[1:], columns):
            if not (t > 0 and t < float("inf")):
                raise ValueError("time_us must be positive finite numbers")
            out.setdefault(key, []).append((i, t))
    except (ValueError, TypeError, IndexError, csv.Error) as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    return {k: [t for _, t in sorted(v)] for k, v in out.items()}
