#!/usr/bin/env bash
# Build and measure the wgmma causal alternatives (bench/NOTES.md, wgmma section 5) on one GPU host
# with torch and nvcc: per combination of build switches, an in-place build of the wgmma and mma
# variants (sm_90 + sm_90a), then bench/hopper_dev.py (correctness sweep, then cold-L2 timings against
# SDPA's flash and cuDNN backends) into $OUT/causal/<combo>/; at the end, one table of every
# combination's median µs per shape and its correctness result.
#
#   OUT=DIR bench/causal_dev.sh [COMBO...]      (default OUT: ./causal_dev_out; default: every combo)
#
# Combinations, in the default order (EVPACK_WGMMA_<switch>=value; ORDER 2 = head-major where it
# balances as well as longest-first, which it does at B16 H16 S512):
#   off          BRANCHFREE_MASK=0 CAUSAL_ORDER=0 CROSS_ITEM=0 DIAG_SKIP=0   (the kernel before section 5)
#   mask_order   BRANCHFREE_MASK=1 CAUSAL_ORDER=2 CROSS_ITEM=0 DIAG_SKIP=0
#   cross        BRANCHFREE_MASK=1 CAUSAL_ORDER=2 CROSS_ITEM=1 DIAG_SKIP=0
#   defaults     no -D flags: the defaults in csrc/variants/wgmma.cuh (all four on)
# The last combination built stays built in place; the default order leaves the defaults.
#
# Environment:
#   OUT                output folder (its causal/ subfolder is written)
#   HOPPER_DEV_ARGS    extra hopper_dev.py arguments (default: --quick, the short correctness sweep,
#                      which still runs several work items per CTA, with tails)
#   HOPPER_DEV_TIMEOUT seconds per hopper_dev.py run (default 120: a kernel that hangs is killed)
#   CAUSAL_DEV_BUDGET  seconds for the whole script (default 540); a measurement that would end past
#                      it is skipped (and recorded), builds still run
#   MAX_JOBS           parallel compile jobs (default: all cores)
#
# A combination that fails to build or to pass the correctness sweep is recorded and the next one
# runs. Exit status: 0 if every combination built and passed, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/causal_dev_out}
RESULTS=$OUT/causal
HOPPER_DEV_ARGS=${HOPPER_DEV_ARGS:---quick}
HOPPER_DEV_TIMEOUT=${HOPPER_DEV_TIMEOUT:-120}
CAUSAL_DEV_BUDGET=${CAUSAL_DEV_BUDGET:-540}
MAX_JOBS=${MAX_JOBS:-$(nproc)}
export MAX_JOBS

declare -A FLAGS=(
    [off]="-DEVPACK_WGMMA_BRANCHFREE_MASK=0 -DEVPACK_WGMMA_CAUSAL_ORDER=0 -DEVPACK_WGMMA_CROSS_ITEM=0 -DEVPACK_WGMMA_DIAG_SKIP=0"
    [mask_order]="-DEVPACK_WGMMA_BRANCHFREE_MASK=1 -DEVPACK_WGMMA_CAUSAL_ORDER=2 -DEVPACK_WGMMA_CROSS_ITEM=0 -DEVPACK_WGMMA_DIAG_SKIP=0"
    [cross]="-DEVPACK_WGMMA_BRANCHFREE_MASK=1 -DEVPACK_WGMMA_CAUSAL_ORDER=2 -DEVPACK_WGMMA_CROSS_ITEM=1 -DEVPACK_WGMMA_DIAG_SKIP=0"
    [defaults]=""
)
ORDER=(off mask_order cross defaults)

combos=("$@")
if [ ${#combos[@]} -eq 0 ]; then
    combos=("${ORDER[@]}")
fi
for c in "${combos[@]}"; do
    if [ -z "${FLAGS[$c]+set}" ]; then
        echo "causal_dev: unknown combination '$c' (known: ${ORDER[*]})" >&2
        exit 2
    fi
done

mkdir -p "$RESULTS"
start=$SECONDS
status=0
left=${#combos[@]}
for c in "${combos[@]}"; do
    left=$((left - 1))
    dir=$RESULTS/$c
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "${FLAGS[$c]}" > "$dir/flags.txt"
    echo "== $c: build (EVPACK_NVCC_FLAGS='${FLAGS[$c]}', $((SECONDS - start)) s in)"
    rm -f python/evpack/_C.*.so  # a failed build must not leave the previous combination's kernels
    t0=$SECONDS
    EVPACK_VARIANTS=wgmma,mma EVPACK_CUDA_ARCHS="90;90a" EVPACK_NVCC_FLAGS="${FLAGS[$c]}" \
        timeout -k 10 420 python setup.py build_ext --inplace > "$dir/build.log" 2>&1
    rc=$?
    echo "$((SECONDS - t0))" > "$dir/build_seconds.txt"
    if [ "$rc" -ne 0 ] || ! compgen -G "python/evpack/_C.*.so" > /dev/null; then
        echo "build failed (exit $rc)" > "$dir/status.txt"
        echo "   build FAILED (exit $rc): $dir/build.log"
        tail -n 20 "$dir/build.log"
        status=1
        continue
    fi
    echo "   built in $((SECONDS - t0)) s"
    # The wgmma objects' PTXAS reports (registers, spills, C75xx advisories), as the build left them.
    find build -path "*generated/_C/wgmma_*.o.ptxas.log" -exec cp {} "$dir/" \;

    remaining=$((CAUSAL_DEV_BUDGET - (SECONDS - start) - 20 * left))  # keep ~20 s per build still to come
    limit=$((remaining < HOPPER_DEV_TIMEOUT ? remaining : HOPPER_DEV_TIMEOUT))
    if [ "$limit" -lt 30 ]; then
        echo "not measured: time budget (${CAUSAL_DEV_BUDGET} s) spent" > "$dir/status.txt"
        echo "   measurement skipped: time budget spent"
        status=1
        continue
    fi
    echo "== $c: hopper_dev.py (at most $limit s)"
    t0=$SECONDS
    # shellcheck disable=SC2086  # HOPPER_DEV_ARGS is a list of arguments
    timeout -k 10 "$limit" python bench/hopper_dev.py --out "$dir" --variants wgmma $HOPPER_DEV_ARGS 2>&1 |
        tee "$dir/hopper_dev.log"
    rc=${PIPESTATUS[0]}
    case $rc in
        0) echo "ok" > "$dir/status.txt" ;;
        124 | 137) echo "timed out after $limit s" > "$dir/status.txt" ;;
        *)  # 1 with failed cases in hopper_dev.json: correctness; anything else: the run itself failed
            if [ "$rc" -eq 1 ] && grep -q '"passed": false' "$dir/hopper_dev.json" 2> /dev/null; then
                echo "correctness failed" > "$dir/status.txt"
            else
                echo "hopper_dev failed (exit $rc)" > "$dir/status.txt"
            fi
            ;;
    esac
    [ "$rc" -eq 0 ] || status=1
    echo "   $(cat "$dir/status.txt") ($((SECONDS - t0)) s)"
done

echo
echo "== summary ($((SECONDS - start)) s; logs under $RESULTS)"
python - "$RESULTS" "${combos[@]}" <<'EOF'
import json, re, sys
from pathlib import Path

results, combos = Path(sys.argv[1]), sys.argv[2:]
timing, info = {}, {}
for c in combos:
    d = results / c
    status = (d / "status.txt").read_text().strip() if (d / "status.txt").exists() else "not run"
    data = json.loads((d / "hopper_dev.json").read_text()) if (d / "hopper_dev.json").exists() else {}
    rows = data.get("correctness", [])
    passed = sum(r["passed"] for r in rows)
    worst = max((r["err"] / max(r["bound"], 1e-30) for r in rows), default=float("nan"))
    logs = sorted(d.glob("wgmma_*.ptxas.log"))
    text = "".join(p.read_text() for p in logs)
    regs = sorted({int(x) for x in re.findall(r"Used (\d+) registers", text)})
    spills = sum(int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text))
    advisories = len(re.findall(r"\(C75\d\d\)", text))
    build_s = (d / "build_seconds.txt").read_text().strip() if (d / "build_seconds.txt").exists() else "?"
    info[c] = (f"{c:<12} {status:<28} correct {passed}/{len(rows)} (worst err/bound {worst:.3f}); "
               f"build {build_s} s; ptxas: registers {regs}, spill bytes {spills}, C75xx {advisories}")
    for r in data.get("timing", []):
        shape = f"D{r['D']} {r['dtype']}{' causal' if r['causal'] else ''}"
        timing.setdefault(shape, {}).setdefault(r["impl"], {})[c] = r["median_us"]
for line in info.values():
    print(line)
if not timing:
    print("no timings")
    sys.exit(0)
ours = [c for c in combos if any(c in impls.get("wgmma/m128n128w12s2", {}) for impls in timing.values())]
print()
print("median µs (cold L2); x cuDNN = cuDNN's median in the same run / ours")
head = f"{'shape':<18}" + "".join(f"{c:>20}" for c in ours) + f"{'mma':>9}{'flash':>9}{'cudnn':>9}"
print(head)
for shape, impls in timing.items():
    line = f"{shape:<18}"
    wg = impls.get("wgmma/m128n128w12s2", {})
    cud = impls.get("sdpa/cudnn", {})
    for c in ours:
        if c in wg:
            ratio = cud.get(c, float("nan")) / wg[c]
            line += f"{wg[c]:>10.2f} ({ratio:5.3f}x)"
        else:
            line += f"{'-':>20}"
    last = ours[-1] if ours else None
    for impl in ("mma/", "sdpa/flash", "sdpa/cudnn"):
        vals = next((v for k, v in impls.items() if k.startswith(impl)), {})
        line += f"{vals.get(last, float('nan')):>9.2f}"
    print(line)
EOF
exit $status
