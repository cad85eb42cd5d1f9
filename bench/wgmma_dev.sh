#!/usr/bin/env bash
# Build and measure alternatives of the wgmma variant (build switches, bench/NOTES.md "wgmma") on one GPU host
# with torch and nvcc: per combination of build switches, an in-place build of the wgmma variant (sm_90a),
# then bench/hopper_dev.py (correctness sweep, then cold-L2 timings against SDPA's flash and cuDNN backends)
# into $OUT/wgmma_dev/<combo>/; at the end, one table of every combination's median µs per shape (with
# cuDNN's time from the same run) and its correctness and PTXAS result.
#
#   OUT=DIR bench/wgmma_dev.sh [COMBO | NAME=FLAGS ...]   (default OUT: ./wgmma_dev_out; default: every combo)
#
# Named combinations: base (no -D flags: the tree as it is). The alternatives measured so far (bench/NOTES.md, wgmma
# sections 5 and 6) left the tree with their switches; to measure one again, add its switch to the kernel and pass
# it as NAME=FLAGS.
# NAME=FLAGS runs FLAGS (nvcc -D flags, space separated) under NAME. The last combination built stays built
# in place.
#
# Environment:
#   OUT                output folder (its wgmma_dev/ subfolder is written)
#   HOPPER_DEV_ARGS    extra hopper_dev.py arguments (default: --quick --timing-variants wgmma, the short
#                      correctness sweep, which still runs several work items per CTA, with tails)
#   HOPPER_DEV_TIMEOUT seconds per hopper_dev.py run (default 150: a kernel that hangs is killed)
#   WGMMA_DEV_BUDGET   seconds for the whole script (default 540); a measurement that would end past it is
#                      skipped (and recorded), builds still run
#   MAX_JOBS           parallel compile jobs (default: all cores)
#
# A combination that fails to build or to pass the correctness sweep is recorded and the next one runs.
# Exit status: 0 if every combination built and passed, 1 otherwise, 2 for an unknown combination.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/wgmma_dev_out}
RESULTS=$OUT/wgmma_dev
HOPPER_DEV_ARGS=${HOPPER_DEV_ARGS:---quick --timing-variants wgmma}
HOPPER_DEV_TIMEOUT=${HOPPER_DEV_TIMEOUT:-150}
WGMMA_DEV_BUDGET=${WGMMA_DEV_BUDGET:-540}
MAX_JOBS=${MAX_JOBS:-$(nproc)}
export MAX_JOBS

declare -A FLAGS=(
    [base]=""
)
ORDER=(base)

combos=()
for arg in "${@:-${ORDER[@]}}"; do
    name=${arg%%=*}
    if [ "$name" != "$arg" ]; then
        FLAGS[$name]=${arg#*=}
    elif [ -z "${FLAGS[$name]+set}" ]; then
        echo "wgmma_dev: unknown combination '$name' (known: ${ORDER[*]}; or NAME=FLAGS)" >&2
        exit 2
    fi
    combos+=("$name")
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
    EVPACK_VARIANTS=wgmma EVPACK_CUDA_ARCHS="90a" EVPACK_NVCC_FLAGS="${FLAGS[$c]}" \
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

    remaining=$((WGMMA_DEV_BUDGET - (SECONDS - start) - 20 * left))  # keep ~20 s per build still to come
    limit=$((remaining < HOPPER_DEV_TIMEOUT ? remaining : HOPPER_DEV_TIMEOUT))
    if [ "$limit" -lt 30 ]; then
        echo "not measured: time budget (${WGMMA_DEV_BUDGET} s) spent" > "$dir/status.txt"
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
        shape = f"B{r['B']}H{r['H']}S{r['S']} D{r['D']} {r['dtype']}{' c' if r['causal'] else ''}"
        timing.setdefault(shape, {}).setdefault(r["impl"], {})[c] = r["median_us"]
for line in info.values():
    print(line)
if not timing:
    print("no timings")
    sys.exit(0)
print()
print("median µs (cold L2) per shape and kernel of ours; x cuDNN = cuDNN's median in the same run / ours")
print(f"{'shape':<24}{'kernel':<22}" + "".join(f"{c:>20}" for c in combos) + f"{'flash':>9}{'cudnn':>9}")
last = combos[-1]
for shape, impls in timing.items():
    cud = impls.get("sdpa/cudnn", {})
    for impl in sorted(i for i in impls if not i.startswith("sdpa/")):
        line = f"{shape:<24}{impl:<22}"
        for c in combos:
            us = impls[impl].get(c)
            line += f"{us:>10.2f} ({cud.get(c, float('nan')) / us:5.3f}x)" if us else f"{'-':>20}"
        line += f"{impls.get('sdpa/flash', {}).get(last, float('nan')):>9.2f}{cud.get(last, float('nan')):>9.2f}"
        print(line)
EOF
exit $status
