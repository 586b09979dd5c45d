#!/usr/bin/env bash
# Paper tables at scale `mini` (Multi30k) on one GPU, from the placed download files to the tables, every
# model of every table training at once on the GPU (RNMT_JOBS_PER_GPU), then `rnmt bench train` and
# `rnmt bench cells --quick` on CUDA.
#
#   benchmarks/gpu/mini-on-one-gpu.sh OUT [MAX_STEPS] [SECONDS] [SEEDS] [TABLES] [BENCH]
#
# OUT receives run.log, env.txt, mini.tgz (the run's tables with their claims, metrics JSON, training
# logs, Snakemake's log, nvidia-smi's utilisation samples) and bench.tgz. MAX_STEPS overrides the
# scale's step budget (default: the scale's own 6,000); SECONDS caps restoring the kept rows (their data made
# first) and the Snakemake run together (default 3600), after which the finished rows' files are still
# collected. SEEDS: seeds a row (default: the scale's, 3;
# 1 times one model a row, as the committed benchmarks/multi30k/ table did). TABLES: comma-separated
# experiment names (default atr-table4; the four headline tables: atr-table2,srnmt-table2,dtmt-table1,atr-table4).
# BENCH: "no" leaves out the benchmarks after the tables (default yes; they take up to 160 s).
# UD_TREES=TRAIN.conllu:DEV.conllu (environment): UD treebank files that train the stanza models the
# UD tables' labels come from (parse.train_trees; the machine reaches no model hub), on the GPU.
# RESTORE=no (environment; or false, 0): train every row of TABLES, restoring none that benchmarks/multi30k/rows/ keeps:
# a lease that times a whole table (the issue's 8 minutes for ATR Table 4) must train it, though its seeds
# are kept (default yes: a lease that adds seeds trains only the missing ones).
# CUDA_TESTS=yes (environment): `pytest -m cuda` beside the tables (OUT/cuda-tests.log, cuda-tests.jsonl),
# so that one lease holds both; its kernels share the GPU with the trainings, so the tables' time is then
# an upper bound.
set -u
out=${1:?usage: $0 OUT [MAX_STEPS] [SECONDS] [SEEDS] [TABLES] [BENCH]}
steps=${2:-}
cap=${3:-3600}
seeds=${4:-$(python3 -c "import yaml; print(yaml.safe_load(open('config.yaml'))['scales']['mini'].get('seeds') or 1)")}
tables=${5:-atr-table4}
bench=${6:-yes}
source "$(dirname "$0")/common.sh"
gpu_start "$out"
# one GPU slot a training job: the number of (variant, seed) models the tables train
jobs=$(python3 - "$tables" "$seeds" <<'PY'
import sys
from pathlib import Path

import yaml

from rnmt.planning.plan import Plan

config = yaml.safe_load(Path("config.yaml").read_text())
scale = {**config["scales"]["mini"], "seeds": int(sys.argv[2]), "max_seeds": int(sys.argv[2])}
plan = Plan({**config, "scale": "mini", "run": "mini-gpu", "tables": sys.argv[1].split(","),
             "scales": {**config["scales"], "mini": scale}}, Path.cwd())
print(sum(len(v.seeds) for v in plan.variants.values()))
PY
)
run=mini-gpu
# the row members benchmarks/multi30k/rows/ keeps (earlier sessions' and loans') are restored into the run,
# not trained again: the targets are the metrics files of the others (a figure's: its table and figure);
# a run with another step budget restores none (its rows are other settings), nor one with RESTORE=no
targets=""
started=$(date +%s)
case ${RESTORE:-yes} in no|false|0) restore=no ;; *) restore=yes ;; esac
for t in $(echo "$tables" | tr ',' ' '); do
    left=$(( cap - ($(date +%s) - started) ))
    if [ "$restore" = no ] || [ -n "$steps" ] || ! found=$(timeout "$(( left > 1 ? left : 1 ))" python3 \
            benchmarks/multi30k/collect.py --run $run --table "$t" --seeds "$seeds" --cores 16 --restore-only \
            2>> "results/$run.restore.log"); then
        found="results/$run/tables/$t.csv"
    fi
    targets="$targets $found"
done
cap=$(( cap - ($(date +%s) - started) ))      # what the restoring left of the cap
cap=$(( cap > 1 ? cap : 1 ))
scale_config="seeds: $seeds, max_seeds: $seeds"
if [ -n "${UD_TREES:-}" ]; then
    scale_config="$scale_config, parse: {models: train, train_trees: {train: ${UD_TREES%%:*}, dev: ${UD_TREES#*:}},
        train_hidden: 200, train_steps_pos: 300, train_steps_depparse: 1500, device: cuda}"
fi
override=""
if [ -n "$steps" ]; then
    valid=$(( steps / 2 ))
    override="override={train: {max_steps: $steps, valid_every: $valid}}"
fi
nvidia-smi dmon -s um -d 5 > "results/$run.dmon.txt" 2>&1 &
dmon=$!
stamp "snakemake: $tables, scale mini, run $run, ${steps:-6000} steps, $seeds seeds a row, $jobs models on one GPU, for at most $cap s"
export RNMT_JOBS_PER_GPU=$jobs
if [ "${CUDA_TESTS:-no}" = yes ]; then
    cuda_tests "$out" "$cap" &
    tests=$!
fi
# the targets first: --resources and --config take every word after them (none: every row is kept)
# shellcheck disable=SC2086
[ -z "${targets// /}" ] || timeout "$cap" python3 -m snakemake $targets --cores 16 --keep-going \
    --resources gpu=$RNMT_JOBS_PER_GPU --config scale=mini run=$run "tables=[$tables]" ${override:+"$override"} \
    "scales={mini: {$scale_config}}" \
    > "results/$run.snakemake.log" 2>&1
rc=$?
stamp "snakemake exit $rc"
if [ -n "${tests:-}" ]; then
    wait "$tests"
    stamp "pytest -m cuda exit $?"
    tail -n 30 "$out/cuda-tests.log"
fi
kill "$dmon" 2>/dev/null
tail -n 15 "results/$run.snakemake.log"
for t in $(echo "$tables" | tr ',' ' '); do
    if [ ! -f "results/$run/tables/$t.md" ]; then
        # the table of the rows that finished here or were restored, the others marked (whole when none is
        # missing); allowed to train nothing: a restored row has no model
        stamp "partial table $t"
        python3 -m snakemake --unlock --config scale=mini run=$run "tables=[$tables]" > /dev/null 2>&1
        # shellcheck disable=SC2086
        python3 -m snakemake "results/$run/tables/partial/$t.md" --cores 16 --allowed-rules partial_table \
            cell_counts --config scale=mini run=$run "tables=[$tables]" ${override:+"$override"} \
            "scales={mini: {$scale_config}}" >> "results/$run.snakemake.log" 2>&1
        cat "results/$run/tables/partial/$t.md" 2>/dev/null
    else
        cat "results/$run/tables/$t.md"
    fi
done
tar czf "$out/mini.tgz" --exclude='*.pt' --exclude='*.keep' --exclude='results/*/data' \
    "results/$run" "results/$run.snakemake.log" "results/$run.restore.log" "results/$run.dmon.txt" 2>/dev/null
stamp "collected"
if [ "$bench" = no ]; then
    stamp "done"
    exit 0
fi

mkdir -p bench-cuda
stamp "rnmt bench train --device cuda (batch 80, 512 wide)"
timeout 100 python3 -m rnmt bench train --device cuda --out bench-cuda > bench-cuda/train.log 2>&1
echo "exit $?"; tail -n 25 bench-cuda/train.log
stamp "rnmt bench cells --quick --device cuda"
timeout 60 python3 -m rnmt bench cells --quick --device cuda --out bench-cuda > bench-cuda/cells.log 2>&1
echo "exit $?"; tail -n 30 bench-cuda/cells.log
tar czf "$out/bench.tgz" bench-cuda
stamp "done"
