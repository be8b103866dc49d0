#!/usr/bin/env bash
# The prepared H100 run of the GPU baseline (issues 37 and 38): one device call of about ten
# minutes that checks every GPU op against the goldens and times it at every point, then
# rebuilds the FPGA-vs-H100 summary.
#
#   here, once (pip reaches the registry here, not there):  bash bench/gpu/fetch_wheels.sh
#   then one device call:  command "bash bench/gpu/run_on_device.sh", carry [".whl"],
#                          timeout_s 600
#
# Writes reports/h100_verify_raw.csv, h100_verify_summary.md, h100_draft_raw.csv,
# h100_draft_summary.md and fpga_vs_h100_summary.md, and copies them with the logs to $OUT
# (the device tool brings back at most 8 files). Each side runs under its own time limit
# (VERIFY_S, DRAFT_S seconds) and rewrites its CSV after every point, smallest batches first,
# so a side stopped at its limit keeps the points it finished (the summary lists the rest as
# MISSING). VERIFY_POINTS / DRAFT_POINTS (ids or prefixes, e.g. "serving-b128") rerun some;
# BENCH_ARGS is added to both sides ("--cpu" tries the script's plumbing on a machine without a
# GPU, writing to build/bench-gpu/ instead of reports/).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
out=${OUT:-build/bench-gpu}
mkdir -p "$out" reports
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
      || echo "no nvidia-smi"
  python3 -c 'import torch, triton, numpy; print("torch", torch.__version__, "cuda",
torch.version.cuda, "triton", triton.__version__, "numpy", numpy.__version__)'
} 2>&1 | tee "$out/device.txt"
start=$(date +%s)
# shellcheck disable=SC2086
timeout "${VERIFY_S:-360}" python3 -m bench.gpu verify ${BENCH_ARGS:-} ${VERIFY_POINTS:+--points $VERIFY_POINTS} \
    2>&1 | tee "$out/verify.log"
echo "verify side: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | tee -a "$out/device.txt"
start=$(date +%s)
# shellcheck disable=SC2086
timeout "${DRAFT_S:-180}" python3 -m bench.gpu draft ${BENCH_ARGS:-} ${DRAFT_POINTS:+--points $DRAFT_POINTS} \
    2>&1 | tee "$out/draft.log"
echo "draft side: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | tee -a "$out/device.txt"
python3 -m bench.gpu summary 2>&1 | tee -a "$out/device.txt"
for f in h100_verify_raw.csv h100_verify_summary.md h100_draft_raw.csv h100_draft_summary.md \
         fpga_vs_h100_summary.md; do
    [ -f "reports/$f" ] && cp "reports/$f" "$out/"
done
ls -l "$out"
