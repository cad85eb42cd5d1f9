"""Stage `correctness`: the correctness oracle per variant (own process each), plus its canaries.

Besides the fixed grid, every pack checks a seeded random set of shortcut-defeating inputs
(shortcut_cases: S not a multiple of any tile, S = 1, a large S, a softmax sharpened x4 to x12,
heavy-tailed inputs, and since generator 2 the structured families of real models: an attention
sink, outlier channels, tied keys). The seed is written to shortcut_inputs.json, so derive()
re-creates the set with the standard library and requires that every case was checked, and that
the reference of every case stands at least REF_RATIO_MIN x above the bound (else a zero output
could pass). The bound rule is the same for every family.

Storage: an oracle's result file <cell>.json of more than STORE_XZ_FROM bytes is kept byte for byte inside
an xz stream, <cell>.json.xz (a variant's grid is 0.55 MB of indented rows, 25 KB in xz); older packs hold
the plain file. Readers go through jsonio.read_member_json, which takes either form.
"""
from __future__ import annotations

import random
import secrets
from dataclasses import replace
from pathlib import Path

from .. import registry
from ..jsonio import read_member_json
from ..markdown import text  # report_md: every pack value escaped
from ..model import SCHEMA_VERSION
from ..packfs import member, read_stored, write_stored
from ..records.canary import OBSERVED_FIRST, CanaryRecord
from ..records.correctness import (
    CaseRow,
    CorrectnessData,
    CorrectnessResult,
    ShortcutFile,
    ShortcutSummary,
    VariantSummary,
    VariantView,
)
from ..records.procs import CellRun
from ..records.required import as_view
from .base import ERROR, FAIL, PASS, StageContext, StageOutcome, read_json, worst, write_json
from .canaries import pack_schema
from .kernel_rows import load_built_kernels
from .order import declared
from .procs import Job, oracle_cmd, proc_problem, record_binary, run_jobs, stage_pool, variants_to_run

NAME = "correctness"
SPEC = declared(NAME)  # stages/order.py: the one declaration of this stage
NEEDS_GPU, TIMEOUT_S = SPEC.needs_gpu, SPEC.timeout_s
REQUIRED_FILES = SPEC.required_files  # raw files a stage that decided keeps (verify requires them)
BINARY_RECORD = SPEC.binary_record  # the record of the binary a passing stage loaded
CANARY = "canary_wrong_result"
FAMILY_CANARY = "canary_input_family"  # right on normal / Student-t / sharp inputs, wrong on a structured family
CANARIES = SPEC.canaries  # CANARY, ..., FAMILY_CANARY
SHORTCUT_FILE = "shortcut_inputs.json"
SHORTCUT_GENERATOR = 2  # bump when shortcut_cases changes what a seed gives (older ones stay re-derivable)
KNOWN_GENERATORS = (1, 2)
# The oldest generator a pack of a schema version may use (older schemas: any known one). Generator 2 brought
# the structured families; a schema-3 pack whose set lacks them has not checked them.
MIN_GENERATOR = {3: 2}
# oracles/common.FAMILIES beyond normal and Student-t: the inputs real models produce
STRUCTURED_FAMILIES = ("sink", "outlier_channels", "ties")
REF_RATIO_MIN = 10.0  # max |ref| / bound: a zero output must miss the bound by this much
STORE_XZ_FROM = 64 << 10  # result files larger than this are kept inside xz (the raw bytes, unchanged)


def shortcut_cases(seed: int, generator: int = SHORTCUT_GENERATOR) -> list[dict]:
    """The shortcut-defeating cases of one seed: pure Python (random.Random), so `verify` re-derives them.

    Per (dtype, head dim): two S drawn in [2, 1024) and one in [4097, 8192), none a multiple of 16 (every
    tile is a multiple of 16), S = 1, a softmax sharpened by a factor drawn in [4, 12], and Student-t
    (3 degrees of freedom) inputs; batch, heads, causal flag and input seed drawn too. Generator 2 adds,
    each at an S drawn in [65, 1024) not a multiple of 16, the structured families (STRUCTURED_FAMILIES,
    built by oracles/common.structure): an attention sink, outlier channels and tied keys. `generator`
    re-creates the set an older pack recorded.
    """
    if generator not in KNOWN_GENERATORS:
        raise ValueError(f"shortcut generator {generator!r} is unknown (known: {KNOWN_GENERATORS})")
    rng = random.Random(seed)

    def odd_seqlen(lo: int, hi: int) -> int:
        while True:
            s = rng.randrange(lo, hi)
            if s % 16:
                return s

    cases = []
    for dtype in registry.DTYPES:
        for d in registry.HEAD_DIMS:
            plan = [("odd", odd_seqlen(2, 1024), "normal", 1.0), ("odd", odd_seqlen(2, 1024), "normal", 1.0),
                    ("s1", 1, "normal", 1.0), ("large", odd_seqlen(4097, 8192), "normal", 1.0),
                    ("sharp", odd_seqlen(65, 1024), "normal", round(rng.uniform(4.0, 12.0), 3)),
                    ("heavy_tail", odd_seqlen(65, 1024), "student_t3", 1.0)]
            if generator >= 2:
                plan += [(family, odd_seqlen(65, 1024), family, 1.0) for family in STRUCTURED_FAMILIES]
            for kind, s, dist, mult in plan:
                b, h = (1, 1) if kind == "large" else (rng.randint(1, 3), rng.randint(1, 4))
                cases.append(dict(case=f"{kind}-{dtype}-d{d}-{len(cases)}", B=b, H=h, S=s, D=d, dtype=dtype,
                                  causal=rng.random() < 0.5, seed=rng.randrange(2**31), layout="bhsd", dist=dist,
                                  scale_mult=mult))
    return cases


def run(ctx: StageContext) -> None:
    seed = secrets.randbits(32)
    write_json(ctx.dir / SHORTCUT_FILE, {"generator": SHORTCUT_GENERATOR, "seed": seed,
                                         "cases": shortcut_cases(seed)})
    jobs = oracle_jobs(ctx.repo, ctx.dir, [v.name for v in variants_to_run(ctx)], CANARIES, seed)
    pool = stage_pool(ctx)  # a scheduled run: the cells share the GPU's slots with the other checks
    run_jobs(jobs, ctx.dir, ctx.repo, gpus=ctx.options.get("gpus"), parallel=None if pool else 1, pool=pool)
    record_binary(ctx.dir, [ctx.dir / f"{j.name}.json" for j in jobs if j.name not in CANARIES])
    for j in jobs:
        store_result(ctx.dir / f"{j.name}.json")


def store_result(path: Path) -> None:
    """An oracle's result file over STORE_XZ_FROM bytes is replaced by <name>.xz holding its bytes unchanged."""
    if not path.is_file() or path.stat().st_size <= STORE_XZ_FROM:
        return
    packed = path.with_name(path.name + ".xz")
    write_stored(packed, path.read_bytes())
    if read_stored(packed) != path.read_bytes():  # never lose the raw file to a bad write
        packed.unlink()
        raise OSError(f"{packed.name}: the xz copy does not read back as {path.name}")
    path.unlink()


# Seconds a cell took on an H200 (artifacts/reference/evidence-quick-20261124T160555Z.log): only the order in
# which a pool starts cells (longest first) depends on them.
EST_VARIANT_S, EST_CANARY_S = 25.0, 11.0


def oracle_jobs(repo: Path, stage_dir: Path, variants: list[str], canaries, seed: int,
                quick: bool = False) -> list[Job]:
    """One oracle process per variant (the full grid, or with `quick` the reduced one, + the seeded shortcut set)
    and per canary (the quick grid; the family canary, right on the normal grid, with the seeded set too: only
    its families can catch it)."""
    grid = ("--quick",) if quick else ()
    jobs = [Job(v, oracle_cmd(repo, "correctness.py", "--variant", v, *grid, "--shortcut-seed", str(seed),
                              "--out", str(stage_dir / f"{v}.json")), 900, est_s=EST_VARIANT_S, forkable=True)
            for v in variants]
    for c in canaries:
        family = ("--shortcut-seed", str(seed)) if c == FAMILY_CANARY else ()
        jobs.append(Job(c, oracle_cmd(repo, "correctness.py", "--variant", c, "--quick", *family, "--out",
                                      str(stage_dir / f"{c}.json")), 300, est_s=EST_CANARY_S, forkable=True))
    return jobs


def _variant_status(stage_dir: Path, name: str) -> tuple[str, str, list[CaseRow]]:
    problem = proc_problem(stage_dir, name)
    if problem:
        return ERROR, problem, []
    try:
        rows = CorrectnessResult.from_json(read_member_json(stage_dir, f"{name}.json", allow_nan=True)).row_views
    except (FileNotFoundError, KeyError, ValueError) as exc:
        return ERROR, f"{name}: no readable result ({exc})", []
    if not rows:
        return ERROR, f"{name}: the oracle checked no case", []
    mismatch = flag_mismatch(rows)
    if mismatch:
        return ERROR, f"{name}: {mismatch}", rows
    bad = [r for r in rows if not row_passed(r)]
    if bad:
        out = [r for r in bad if not r.max_err <= r.bound]
        if not out:  # every failed case was within the bound: the input comparison failed them
            return FAIL, f"{name}: {len(bad)}/{len(rows)} cases failed" + _cheat_notes(bad), rows
        w = min(out, key=lambda r: r.margin if r.margin == r.margin else float("-inf"))
        head = f"{len(bad)}/{len(rows)} cases out of bound" if len(out) == len(bad) else \
            f"{len(bad)}/{len(rows)} cases failed, {len(out)} out of bound"
        reason = (f"{name}: {head}, worst {w.config} {w.dtype} D={w.D} S={w.S} causal={w.causal}: err "
                  f"{w.max_err:.3g} > bound {w.bound:.3g}")
        return FAIL, reason + _cheat_notes(bad), rows
    return PASS, f"{name}: {len(rows)} cases within bound", rows


def row_passed(row: dict | CaseRow) -> bool:
    """A case's verdict from its numbers, as the oracle decides it (oracles/correctness.py): every output element
    finite, max_err <= bound (a NaN error is a failure) and no input element changed. Rows of older oracles that
    do not record nonfinite or inputs_changed are judged on the fields they hold."""
    r = as_view(CaseRow, row)
    return r.nonfinite_count == 0 and r.max_err <= r.bound and r.changed_count == 0


def flag_mismatch(rows: list[CaseRow]) -> str | None:
    """The first row whose stored `passed` disagrees with its own numbers (row_passed), named; None when every
    flag agrees. derive() never takes a verdict from the flag, and a result whose flags contradict its numbers
    was not written by the oracle as it stands."""
    for i, r in enumerate(rows):
        try:
            ok = row_passed(r)
        except (KeyError, TypeError) as exc:
            return f"row {i} has no readable verdict ({type(exc).__name__}: {exc})"
        if r.passed is not ok:
            return (f"row {i} ({r.config} {r.dtype} D={r.D} S={r.S} causal={r.causal}) records "
                    f"passed={r.passed} but its numbers give {ok} (err {r.max_err:.3g}, bound "
                    f"{r.bound:.3g}, nonfinite {r.nonfinite if r.has('nonfinite') else '-'}, inputs changed "
                    f"{r.inputs_changed if r.has('inputs_changed') else '-'})")
    return None


def _cheat_notes(bad: list[CaseRow]) -> str:
    """What the poison and the input comparison saw (rows of packs that record them)."""
    notes = []
    unwritten = [r for r in bad if r.nonfinite]
    mutated = [r for r in bad if r.inputs_changed]
    if unwritten and bad[0].has("ref_max"):
        notes.append(f"{len(unwritten)} cases left NaN-poisoned output elements unwritten "
                     f"(up to {max(r.nonfinite for r in unwritten)})")
    if mutated:
        notes.append(f"{len(mutated)} cases changed q/k/v (up to {max(r.inputs_changed for r in mutated)} elements)")
    return "".join(f"; {n}" for n in notes)


def least_generator(schema: int) -> int:
    """The oldest shortcut generator a pack of `schema` may have used."""
    return max([g for s, g in MIN_GENERATOR.items() if s <= schema], default=KNOWN_GENERATORS[0])


def built_configs(pack_dir: Path) -> dict[tuple[str, str, int], set[str]] | None:
    """{(variant, dtype, head_dim): its configs} of build/kernels.json: what the pack's own build made, so a config
    added to the registry later asks nothing of an older pack. None when kernels.json is unusable (the PTXAS and
    SASS derivations name that)."""
    try:
        kernels, _ = load_built_kernels(pack_dir)
    except OSError:
        return None
    if kernels is None:
        return None
    out: dict[tuple[str, str, int], set[str]] = {}
    for variant, config, dtype, head_dim in kernels:
        out.setdefault((variant, dtype, head_dim), set()).add(config)
    return out


def shortcut_problems(stage_dir: Path, rows_by_variant: dict[str, list[CaseRow]], *,
                      schema: int = SCHEMA_VERSION, built: dict[tuple[str, str, int], set[str]] | None = None
                      ) -> list[str]:
    """Why the seeded shortcut set is not fully proven (empty when it is): re-derived from the seed with the
    generator the pack recorded, which must be one the pack's schema allows. Every case must be checked on every
    config `built` (built_configs) holds for its variant, dtype and head dim; without it, on the registry's."""
    try:
        rec = ShortcutFile.from_json(read_json(stage_dir / SHORTCUT_FILE))
        seed, written = rec.seed, rec.cases
    except (FileNotFoundError, KeyError, ValueError, TypeError) as exc:
        return [f"{SHORTCUT_FILE} unreadable ({exc})"]
    generator = rec.generator
    if generator not in KNOWN_GENERATORS:
        return [f"{SHORTCUT_FILE}: generator {generator!r} is not one this code knows "
                f"({', '.join(map(str, KNOWN_GENERATORS))})"]
    if generator < least_generator(schema):
        return [f"{SHORTCUT_FILE}: generator {generator} predates the structured input families "
                f"({', '.join(STRUCTURED_FAMILIES)}) every schema-{schema} pack checks (generator >= "
                f"{least_generator(schema)})"]
    cases = shortcut_cases(seed, generator)
    if written != cases:
        return [f"{SHORTCUT_FILE}: its cases are not what seed {seed} gives"]
    problems = []
    for name, rows in rows_by_variant.items():
        try:
            var = registry.get(name)
        except ValueError:
            problems.append(f"{name}: not a registered variant")
            continue
        rows = [as_view(CaseRow, r) for r in rows]
        checked = {(r.case, r.config) for r in rows if r.set == "shortcut"}
        def configs(c: CaseRow, _var=var, _name=name) -> list[str]:
            if built is not None:
                return sorted(built.get((_name, c.dtype, c.D), ()))
            return [cfg.name for cfg in _var.configs_for(c.D)] if c.dtype in _var.dtypes else []
        want = [(c.case, cfg) for c in map(CaseRow.from_json, cases) for cfg in configs(c)]
        missing = [w for w in want if w not in checked]
        if missing:
            problems.append(f"{name}: {len(missing)}/{len(want)} shortcut cases not checked (first {missing[0]})")
        weak = [r for r in rows if r.given("ref_max") and not r.ref_max >= REF_RATIO_MIN * r.bound]
        if weak:
            w = weak[0]
            problems.append(f"{name}: {len(weak)} cases where max|ref| < {REF_RATIO_MIN:g} x bound (first "
                            f"{w.dtype} D={w.D} S={w.S}: {w.ref_max:.3g} vs {w.bound:.3g}): "
                            f"a zero output would pass")
    return problems


def required_files(stage_dir: Path) -> tuple[str, ...]:
    """REQUIRED_FILES, and the shortcut set's seed file when a cell was run on it (its command says so)."""
    try:
        procs = read_json(stage_dir / "procs.json")
        seeded = any("--shortcut-seed" in CellRun.of(rec).command for rec in procs.values())
    except (OSError, ValueError, AttributeError, TypeError):
        return REQUIRED_FILES  # unreadable: the derivation names it
    return REQUIRED_FILES + ((SHORTCUT_FILE,) if seeded else ())


def derive(stage_dir: Path, pack_dir: Path) -> StageOutcome:
    procs = read_json(stage_dir / "procs.json")
    names = [n for n in procs if n not in CANARIES]
    results, per_variant, all_rows = {}, {}, {}
    for n in names:
        status, reason, rows = _variant_status(stage_dir, n)
        results[n] = (status, reason)
        all_rows[n] = rows
        per_variant[n] = VariantSummary(status, reason, len(rows), min((r.margin for r in rows), default=None),
                                        max((r.max_err for r in rows), default=None))
    canaries = []
    for c in (c for c in CANARIES if c in procs):
        entry, rows = _canary(stage_dir, c)
        canaries.append(entry)
        mismatch = flag_mismatch(rows)
        if mismatch:  # a canary result whose flags contradict its numbers: the stage's record is not the oracle's
            results[c] = (ERROR, f"{c}: {mismatch}")
    status = worst(s for s, _ in results.values())
    reason = "; ".join(r for s, r in results.values() if s != PASS) or \
        f"{sum(v.cases for v in per_variant.values())} cases within the bound for {', '.join(names)}"
    shortcut = None
    if (stage_dir / SHORTCUT_FILE).exists():  # packs before the shortcut set have no such file
        problems = shortcut_problems(stage_dir, {n: rows for n, rows in all_rows.items() if rows},
                                     schema=pack_schema(pack_dir), built=built_configs(pack_dir))
        shortcut_rows = [r for rows in all_rows.values() for r in rows if r.set == "shortcut"]
        shortcut = ShortcutSummary(ShortcutFile.from_json(read_json(stage_dir / SHORTCUT_FILE)).recorded_seed,
                                   len(shortcut_rows), problems,
                                   min((r.ref_max / r.bound for rows in all_rows.values() for r in rows
                                        if r.given("bound") and r.bound), default=None))
        if problems:
            status = ERROR
            reason = "; ".join(problems + [r for s, r in results.values() if s != PASS])
        elif status == PASS:
            reason += f" (incl. {len(shortcut_rows)} seeded shortcut cases, seed {shortcut.seed})"
    data = {"variants": {n: v.to_json() for n, v in per_variant.items()}, "canaries": canaries,
            **({"shortcut": shortcut.to_json()} if shortcut is not None else {})}
    return StageOutcome(status, reason, data)


def _canary_entry(stage_dir: Path, name: str) -> dict:
    """The canary's row of the matrix (_canary)."""
    return _canary(stage_dir, name)[0]


def _canary(stage_dir: Path, name: str) -> tuple[dict, list[CaseRow]]:
    """The canary's row of the matrix, and its result rows: caught when this gate failed it on its numbers (a row
    flagged failed whose numbers are within the bound is an ERROR, never a catch); the family canary only when a
    case of a structured family failed (its fault is invisible to the normal grid and to the older families)."""
    status, reason, rows = _variant_status(stage_dir, name)
    entry = CanaryRecord(name, status == FAIL, status, expected="fail", reason=reason, layout=OBSERVED_FIRST)
    if name == FAMILY_CANARY:
        failed = sorted({r.family for r in rows if not row_passed(r)})
        structured = [f for f in failed if f in STRUCTURED_FAMILIES]
        entry = replace(entry, expected=f"fail on a structured family ({', '.join(STRUCTURED_FAMILIES)})",
                        caught=status == FAIL and bool(structured),
                        observed=f"{status}: failed families {', '.join(failed) or 'none'}")
    return entry.to_json(), rows


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def report_md(stage_dir: Path, outcome: StageOutcome) -> str:
    lines = ["Bound: max |out - ref| <= 2 x PyTorch same-precision error + rounding floor (float64 reference; "
             "NaN-poisoned outputs).", "", "| variant | status | cases | max error | min margin |",
             "|---|---|---|---|---|"]
    variants = CorrectnessData.from_json(outcome.data).variants
    for n, value in variants.items():
        v = VariantView.from_json(value)
        lines.append(f"| {text(n)} | {text(v.status)} | {text(v.cases)} | {_fmt(v.max_err)} | "
                     f"{_fmt(v.min_margin)} |")
    lines += ["", "Per config x dtype x head dim (worst case):", "",
              "| variant | config | dtype | D | cases | max error | bound at worst | pass |", "|---|---|---|---|---|---|---|---|"]
    for n in variants:
        try:
            if not member(stage_dir, f"{n}.json").exists():
                continue
        except ValueError:
            continue
        groups: dict = {}
        for r in CorrectnessResult.from_json(read_member_json(stage_dir, f"{n}.json", allow_nan=True)).row_views:
            groups.setdefault((r.config, r.dtype, r.D), []).append(r)
        for (cfg, dt, d), rows in sorted(groups.items()):
            w = min(rows, key=lambda r: r.margin)
            lines.append(f"| {text(n)} | {text(cfg)} | {text(dt)} | {text(d)} | {len(rows)} | {w.max_err:.3g} | "
                         f"{w.bound:.3g} | "
                         f"{'yes' if all(row_passed(r) for r in rows) else 'NO'} |")
    return "\n".join(lines)


__all__ = ["registry"]
