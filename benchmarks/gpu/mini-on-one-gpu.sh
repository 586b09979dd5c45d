#!/usr/bin/env bash
# ATR Table 4 at scale `mini` (Multi30k En-De) on one GPU, from the placed download files to the table,
# all seven rows sharing the GPU (RNMT_JOBS_PER_GPU), then `rnmt bench train` and `rnmt bench cells --quick` on CUDA.
#
#   benchmarks/gpu/mini-on-one-gpu.sh OUT [MAX_STEPS] [SECONDS] [SEEDS]
#
# OUT receives run.log, env.txt, mini.tgz (the run's tables, metrics JSON, training logs, Snakemake's
# log, nvidia-smi's utilisation samples) and bench.tgz. MAX_STEPS overrides the scale's step budget
# (default: the scale's own 6,000); SECONDS caps the Snakemake run (default 3600), after which the
# finished rows' files are still collected. SEEDS: seeds a row (default: the scale's, 3; 1 times one model
# a row, as the committed benchmarks/multi30k/ table did).
set -u
out=${1:?usage: $0 OUT [MAX_STEPS] [SECONDS] [SEEDS]}
steps=${2:-}
cap=${3:-3600}
seeds=${4:-$(python3 -c "import yaml; print(yaml.safe_load(open('config.yaml'))['scales']['mini'].get('seeds') or 1)")}
source "$(dirname "$0")/common.sh"
gpu_start "$out"

run=mini-gpu
override=""
if [ -n "$steps" ]; then
    valid=$(( steps / 2 ))
    override="override={train: {max_steps: $steps, valid_every: $valid}}"
fi
nvidia-smi dmon -s um -d 5 > "results/$run.dmon.txt" 2>&1 &
dmon=$!
stamp "snakemake: ATR Table 4, scale mini, run $run, ${steps:-6000} steps, $seeds seeds a row, all on one GPU"
export RNMT_JOBS_PER_GPU=$(( 7 * seeds ))
# the target first: --resources and --config take every word after them
timeout "$cap" python3 -m snakemake "results/$run/tables/atr-table4.csv" --cores 16 --keep-going \
    --resources gpu=$RNMT_JOBS_PER_GPU --config scale=mini run=$run ${override:+"$override"} \
    "scales={mini: {seeds: $seeds, max_seeds: $seeds}}" \
    > "results/$run.snakemake.log" 2>&1
rc=$?
kill "$dmon" 2>/dev/null
stamp "snakemake exit $rc"
tail -n 15 "results/$run.snakemake.log"
cat "results/$run/tables/atr-table4.md" 2>/dev/null
tar czf "$out/mini.tgz" --exclude='*.pt' --exclude='*.keep' --exclude='results/*/data' \
    "results/$run" "results/$run.snakemake.log" "results/$run.dmon.txt" 2>/dev/null
stamp "collected"

mkdir -p bench-cuda
stamp "rnmt bench train --device cuda (batch 80, 512 wide)"
timeout 100 python3 -m rnmt bench train --device cuda --out bench-cuda > bench-cuda/train.log 2>&1
echo "exit $?"; tail -n 25 bench-cuda/train.log
stamp "rnmt bench cells --quick --device cuda"
timeout 60 python3 -m rnmt bench cells --quick --device cuda --out bench-cuda > bench-cuda/cells.log 2>&1
echo "exit $?"; tail -n 30 bench-cuda/cells.log
tar czf "$out/bench.tgz" bench-cuda
stamp "done"
