#!/usr/bin/env bash
# Issue 25 on one GPU machine (an H200 with torch 2.11+cu130, nvcc 13.0, no nox), from the repository root:
#
#     OUT=/path/to/results bash bench/validate_timing.sh
#
# 1. builds the extension and the canaries in place (EVPACK_CANARIES=1, sm_90 and sm_90a unless
#    EVPACK_CUDA_ARCHS says otherwise);
# 2. runs the GPU tests of the timing changes (tests/test_bench_content_gpu.py, tests/test_bench_harness_gpu.py);
# 3. makes a bench-only quick-suite pack (`python -m evpack bench --suite quick`, with --self-check in a git
#    checkout: the A/B of HEAD against itself) and verifies it;
# 4. prints a table: per row of ours its median, floor_us, pct_sol and timed_content_unique; the canary
#    verdicts; the content probe; the A/B counts; what the new checks cost.
# Everything it writes goes under $OUT (logs, the pack, table.txt). Budget: under 8 minutes on an H200.
set -u
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
export EVPACK_CUDA_ARCHS="${EVPACK_CUDA_ARCHS:-90;90a}" EVPACK_CANARIES=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
T0=$(date +%s)
LIMIT=470  # seconds for the whole script (the last step gets what the others left)

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { local l=$(( LIMIT - $(elapsed) )); [ "$l" -lt 30 ] && l=30; echo "$l"; }
step() { echo "== $(elapsed) s: $*" | tee -a "$OUT/steps.log"; }

step "build (EVPACK_CUDA_ARCHS=$EVPACK_CUDA_ARCHS, canaries)"
timeout 240 "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1
rc_build=$?
if [ "$rc_build" -ne 0 ]; then
  tail -40 "$OUT/build.log"
  step "build failed (exit $rc_build): nothing else can run"
  exit 1
fi

step "GPU tests"
timeout 170 "$PY" -m pytest -q -m gpu -rsP -p no:cacheprovider tests/test_bench_content_gpu.py \
  tests/test_bench_harness_gpu.py > "$OUT/gpu-tests.log" 2>&1
rc_tests=$?
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed|canary_|repeat/fresh|\{\"" "$OUT/gpu-tests.log" | tail -30

step "bench-only quick pack"
args=(bench --suite quick --packs-dir "$OUT/packs" --require partial)
if git rev-parse HEAD > /dev/null 2>&1; then
  args+=(--self-check)
  export EVPACK_AB_DIR="$OUT/ab-worktree"
fi
timeout "$(( $(left) - 20 ))" "$PY" -m evpack "${args[@]}" > "$OUT/bench-run.log" 2>&1
rc_bench=$?
tail -8 "$OUT/bench-run.log"

step "table"
"$PY" - "$OUT" "$rc_tests" "$rc_bench" <<'PYEOF' | tee "$OUT/table.txt"
import json
import sys
from pathlib import Path

out, rc_tests, rc_bench = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
packs = sorted((p for p in (out / "packs").glob("*") if p.is_dir() and not p.is_symlink()
                and not p.name.startswith(".")), key=lambda p: p.stat().st_mtime)
print(f"gpu tests exit {rc_tests}; bench run exit {rc_bench}")
if not packs:
    sys.exit("no pack was written")
pack = packs[-1]
bench = pack / "bench"
folders = [bench] if (bench / "summary.json").is_file() and not (bench / "shards.json").is_file() else \
    sorted(p for p in bench.glob("shard*") if p.is_dir())
pj = json.loads((pack / "pack.json").read_text())
st = pj["stages"].get("bench", {})
print(f"pack {pack.name}: label {pj.get('label')}; bench {st.get('status')} in {st.get('duration_s')} s: "
      f"{str(st.get('reason'))[:300]}")
rows = []
for f in folders:
    rows += json.loads((f / "summary.json").read_text())["rows"]
timed = [r for r in rows if r.get("median_us") is not None]
print(f"{'row (impl|variant|config|shape|mode)':<78} {'median':>9} {'floor':>8} {'bound':>6} {'%sol':>6} unique")
for r in sorted(timed, key=lambda r: r["key"]):
    if r["impl"] != "evpack":
        continue
    print(f"{r['key'][:78]:<78} {r['median_us']:9.2f} {r.get('floor_us') or 0:8.2f} {str(r.get('bound')):>6} "
          f"{r.get('pct_sol') or 0:6.1f} {r.get('timed_content_unique')}")
under = [r["key"] for r in timed if r.get("floor_us") and r["median_us"] < r["floor_us"]]
not_unique = [r["key"] for r in timed if r.get("timed_content_unique") is not True]
best = max(timed, key=lambda r: r.get("pct_sol") or 0) if timed else None
print(f"{len(timed)} timed rows; under their floor: {len(under)}; not unique: {len(not_unique)}; "
      f"highest pct_sol {best and round(best.get('pct_sol') or 0, 1)} ({best and best['key']})")
outcome = json.loads((bench / "outcome.json").read_text()) if (bench / "outcome.json").is_file() else {}
data = outcome.get("data", {})
for c in data.get("canaries", []):
    print(f"canary {c['name']}: caught={c['caught']} :: {str(c.get('observed'))[:260]}")
for f in folders:
    probe = f / "content_probe.json"
    if probe.is_file():
        sys.path.insert(0, "python")
        from evpack.timing.content_probe import judge

        p = json.loads(probe.read_text())
        ratios = {f"{e['variant']}/{e['config']}": judge(e)["ratio"] for e in p["entries"]}
        print(f"content probe ({f.name}): " + ", ".join(f"{k} {v:.3f}" if v else f"{k} -" for k, v in ratios.items()))
    ab = f / "ab.json"
    if ab.is_file():
        a = json.loads(ab.read_text())
        print(f"A/B ({f.name}, rule v{a.get('rule_version', 1)}): {a.get('status')} {a.get('counts')}, "
              f"re-timed {len(a.get('confirm_keys') or [])}, regressions {len(a.get('regressions') or [])}")
        for e in a.get("rows", []):
            if e["verdict"] != "SAME":
                print(f"   {e['verdict']:<7} {e['key'][:90]} {e['reason'][:160]}")
    integ = f / "integrity.json"
    if integ.is_file():
        print(f"integrity ({f.name}): " + json.dumps(json.loads(integ.read_text())))
ver = [ln for ln in (out / "bench-run.log").read_text(errors="replace").splitlines() if "verif" in ln.lower()]
print("verify: " + (ver[-1] if ver else "no verify line in the log"))
PYEOF
step "done (build $rc_build, tests $rc_tests, bench $rc_bench)"
