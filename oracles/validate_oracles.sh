#!/usr/bin/env bash
# Validate, on a GPU machine, the schema-3 oracle checks and their four canaries with the pack's own code:
#   canary_capture_aware  -> stability (the captured graph's kernel nodes)
#   canary_output_alias   -> stability (earlier outputs kept alive and rechecked, storage overlap)
#   canary_fp16_accum     -> sass      (tensor instructions must accumulate in F32)
#   canary_input_family   -> correctness (the structured input families: sink, outlier channels, ties)
# and the honest scalar and mma variants through the same oracles (every input family included).
#
#   OUT=/path/to/results oracles/validate_oracles.sh      # from the repository root
#
# Needs: a CUDA GPU (sm_90: H100/H200), torch with CUDA, nvcc, ninja, cuobjdump + nvdisasm on PATH (or in
# CUDA_HOME/bin); no nox, no compute-sanitizer, nothing downloaded. Builds in a copy of the tree under
# $OUT/work (the checkout is not touched) with the build stage itself (setup.py build_ext --inplace,
# EVPACK_CANARIES=1, EVPACK_VARIANTS=scalar,mma + the four canaries, EVPACK_CUDA_ARCHS=90 unless set), runs
# the SASS stage, the correctness and stability oracles (the stages' own job lists: quick grids, 200
# launches, no diagnostic replay) and derives each stage's decision as a schema-3 pack would; then the GPU
# tests of tests/test_cheats.py in that copy. Prints a table (canary, gate, caught, reason, and what the
# other oracles said) and writes $OUT/table.txt, $OUT/validate.log and $OUT/results.tar.gz (every stage
# folder: oracle JSON, logs, procs.json, the SASS dump). Exit status 0 only when every canary is caught by
# its gate and the honest variants pass every gate. About 4-5 minutes on an H200 (most of it the build).
set -euo pipefail
: "${OUT:?set OUT to the folder for the results}"
repo="$(pwd)"
if [ ! -f "$repo/setup.py" ] || [ ! -d "$repo/oracles" ]; then
  echo "validate_oracles.sh: run it from the repository root" >&2
  exit 2
fi
PY="${PYTHON:-python3}"
work="$OUT/work"
rm -rf "$work"
mkdir -p "$work/tree"
cp -r "$repo/csrc" "$repo/oracles" "$repo/python" "$repo/tests" "$repo/setup.py" "$repo/pyproject.toml" "$work/tree/"
rm -f "$work/tree"/python/evpack/_C*.so "$work/tree"/python/evpack/_canaries*.so
export PYTHONPATH="$work/tree/python" PYTHONUNBUFFERED=1
export EVPACK_CANARIES=1
export EVPACK_VARIANTS="scalar,mma,canary_capture_aware,canary_output_alias,canary_fp16_accum,canary_input_family"
export EVPACK_CUDA_ARCHS="${EVPACK_CUDA_ARCHS:-90}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"

set +e
"$PY" - "$work/tree" "$work/pack" "$OUT/table.txt" <<'PYEOF' 2>&1 | tee "$OUT/validate.log"
import secrets
import sys
import time
from pathlib import Path

from evpack import registry
from evpack.stages import build, correctness, sass, stability
from evpack.stages.base import PASS, StageContext, read_json, write_json
from evpack.stages.procs import run_jobs

tree, pack, table_path = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
HONEST = ("scalar", "mma")
NEW = ("canary_capture_aware", "canary_output_alias", "canary_fp16_accum", "canary_input_family")
t0 = time.monotonic()


def note(msg: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {msg}", flush=True)


def stage_dir(name: str) -> Path:
    d = pack / name
    d.mkdir(parents=True)
    return d


pack.mkdir(parents=True)
write_json(pack / "pack.json", {"schema_version": 3})  # decide as a pack made now would

b = stage_dir("build")
note(f"build: setup.py build_ext --inplace in {tree} (EVPACK_VARIANTS and EVPACK_CUDA_ARCHS from the environment)")
build.run(StageContext(pack, b, tree))
bo = build.derive(b, pack)
note(f"build: {bo.status}: {bo.reason}")
if bo.status != PASS:
    print((b / "build.log").read_text(errors="replace")[-4000:])
    sys.exit(1)

s = stage_dir("sass")
sass.run(StageContext(pack, s, tree))
so = sass.derive(s, pack)
note(f"sass: {so.status}: {so.reason}")
sass_canary = {c["name"]: c for c in so.data.get("canaries", [])}

c = stage_dir("correctness")
seed = secrets.randbits(32)
write_json(c / correctness.SHORTCUT_FILE, {"generator": correctness.SHORTCUT_GENERATOR, "seed": seed,
                                            "cases": correctness.shortcut_cases(seed)})
st = stage_dir("stability")
jobs_c = correctness.oracle_jobs(tree, c, list(HONEST), NEW, seed, quick=True)
jobs_s = stability.oracle_jobs(tree, st, list(HONEST), NEW, launches=200, diagnostic=False)
note(f"correctness: {len(jobs_c)} oracle processes (seed {seed}); stability: {len(jobs_s)}")
run_jobs(jobs_c, c, tree, parallel=4)
note("correctness oracles done")
run_jobs(jobs_s, st, tree, parallel=4)
note("stability oracles done")

# Each oracle's view of each kernel (a canary is run here by every oracle, to show the other gates pass it).
other = {"correctness": {n: correctness._variant_status(c, n)[:2] for n in HONEST + NEW},
         "stability": {n: stability._cell(st, n, 3)[:2] for n in HONEST + NEW},
         "sass": {n: ((sass_canary[n]["status"], sass_canary[n]["reason"] or sass_canary[n]["observed"])
                      if n in sass_canary else (so.status, so.reason)) for n in HONEST + NEW}}


def derive_as_stage(stage, d: Path, keep) -> object:
    """The stage's own derive over the cells the stage itself would have run (its variants and canaries)."""
    procs = read_json(d / "procs.json")
    write_json(d / "procs.full.json", procs)
    write_json(d / "procs.json", {k: v for k, v in procs.items() if k in keep})
    out = stage.derive(d, pack)
    write_json(d / "outcome.json", out.to_json())
    return out


co = derive_as_stage(correctness, c, HONEST + correctness.CANARIES)
sto = derive_as_stage(stability, st, HONEST + stability.CANARIES)
note(f"correctness stage: {co.status}: {co.reason}")
note(f"stability stage: {sto.status}: {sto.reason}")
caught_in = {"correctness": {e["name"]: e for e in co.data["canaries"]},
             "stability": {e["name"]: e for e in sto.data["canaries"]}, "sass": sass_canary}

rows, ok = [], True
for n in NEW:
    gate = registry.get(n, include_canaries=True).expect_caught_by
    entry = caught_in[gate].get(n, {"caught": False, "reason": f"{gate} did not run it", "observed": ""})
    others = ", ".join(f"{g} {other[g][n][0]}" for g in other if g != gate)
    rows.append((n, gate, "yes" if entry["caught"] else "NO", str(entry.get("observed", "")), others,
                 (entry.get("reason") or "")[:300]))
    ok &= bool(entry["caught"])
    ok &= all(other[g][n][0] == PASS for g in other if g != gate)  # every other gate passes it
for n in HONEST:
    statuses = {g: other[g][n][0] for g in other}
    rows.append((n, "(honest)", "-", ", ".join(f"{g} {v}" for g, v in statuses.items()), "",
                 "; ".join(other[g][n][1] for g in other if statuses[g] != PASS)[:300]))
    ok &= all(v == PASS for v in statuses.values())
ok &= co.status == PASS and sto.status == PASS and so.status == PASS
lines = ["| canary | gate | caught | observed | other oracles | reason |", "|---|---|---|---|---|---|"]
lines += ["| " + " | ".join(x.replace("|", "/") for x in r) + " |" for r in rows]
lines += ["", f"stages: sass {so.status}, correctness {co.status}, stability {sto.status}",
          f"verdict: {'OK' if ok else 'NOT OK'} ({time.monotonic() - t0:.0f} s)"]
table_path.write_text("\n".join(lines) + "\n")
print("\n".join(lines), flush=True)
sys.exit(0 if ok else 1)
PYEOF
rc=${PIPESTATUS[0]}
set -e

# The GPU tests of the cheat checks, on the same build (they run the oracles themselves).
if compgen -G "$work/tree/python/evpack/_canaries*.so" > /dev/null; then
  (set -o pipefail; cd "$work/tree" && timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu \
     tests/test_cheats.py 2>&1 | tee -a "$OUT/validate.log" | tail -5) || rc=1
fi
tar -czf "$OUT/results.tar.gz" -C "$work" pack
rm -rf "$work"
echo "validate_oracles.sh: exit $rc; results in $OUT (table.txt, validate.log, results.tar.gz)"
exit "$rc"
