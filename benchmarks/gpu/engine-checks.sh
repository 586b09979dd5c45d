#!/usr/bin/env bash
# Every GPU check of the engine, the benchmarks first, on a quiet GPU, in calls of under 10 minutes (steps 1-3
# at their limits take 610 s, 760 s with a baseline, and `atr` 150 s more: split them with CHECKS below):
#
#   benchmarks/gpu/engine-checks.sh OUT [BASELINE_SRC] [TABLES] [OVERRIDE]
#
#  1. rnmt bench train --size paper --profile: the tables' systems at their papers' sizes (target words/s,
#     kernels per decoder step forward and backward, GPU-busy fraction, TFLOP/s against the bf16 peak),
#     first with the engine in BASELINE_SRC (a copy of an older src/ with this checkout's bench/, so both
#     are measured alike, run from its parent folder, which holds that commit's workflow/ and config.yaml;
#     skipped when not given), then this checkout's with `--graphs` (the same step as a replayed CUDA graph)
#  1c. (check `atr`, not in the default) RNNSearch+ATR at ATR Table 4's sizes beside RNNSearch+GRU (bench
#     train's baseline row), eager and as a replayed CUDA graph, profiled: the kernels that took a replayed
#     step's time (`graph_heaviest_kernels`) and the paths the graph chose by timing replays, every choice's
#     times in fast-paths-atr.json
#  2. ATR's recurrence against cuDNN's GRU (forward+backward, batch 80, length 50, hidden 1000), first in
#     bfloat16 (`--precision bfloat16`: cuDNN's layers in bfloat16, the cells under bfloat16 autocast, ATR's
#     persistent kernels with their products on the tensor cores, RNMT_ATR_PERSISTENT=1), then ATR alone taking
#     the fastest of its ways (RNMT_ATR_PERSISTENT=auto: per step, persistent in two tilings; their times in
#     fast-paths-cells.json), then in float32 with ATR's per-step kernels and with its persistent ones;
#     last, DTMT's L-GRU and T-GRU on their row kernels (cells/triton/gated.py) beside their step loops, float32
#  3. rnmt bench decode --size paper --graphs --profile --tf32: beam 1 and 10 at ATR Table 4's sizes, batched
#     and one at a time with eager steps, batched again with the search steps replayed as CUDA graphs, each
#     batched decode profiled once (kernels per sentence, GPU-busy fraction, the kinds of work that took the
#     time), and the replayed one again with its products in TF32 (decode setting tf32);
#     rnmt bench decoder: RNNSearch's and DTMT#1's decoders, step loop against the fused function, hidden
#     256/512/1000
# Each check runs within its own limit and what is left of BUDGET (below), in the order CHECKS names them
# (the one a short call wants most first), and bench.tgz is rewritten after each, so a call cut short brings
# back every check that finished.
#  4. TABLES (default "atr-table4 srnmt-table4"; "none": no table, `pytest -m cuda` alone; "skip": neither)
#     at scale mini from the placed Multi30k files, every row side by side on the GPU, with the config
#     override OVERRIDE (e.g. "{train: {cuda_graphs: false}}") if given, until the call's 560 s are used up,
#     with `pytest -m cuda` beside it (a correctness suite: its time is not measured)
#
# OUT receives run.log, env.txt, bench.tgz (the CSVs and logs of 1-3), cuda-tests.log and cuda-tests.jsonl
# (every error the CUDA tests measured), table.tgz (the run's tables, metrics JSON, translations, training
# logs, Snakemake's log, nvidia-smi's samples; no models). The Multi30k downloads must be in
# results/downloads/ (the machine has no network); packages the machine lacks are installed by the caller.
set -u
out=${1:?usage: $0 OUT [BASELINE_SRC] [TABLES] [OVERRIDE]}
baseline=${2:-}
tables=${3:-atr-table4 srnmt-table4}
override=${4:-}
# CHECKS (environment; default all three) picks the benchmarks of steps 1-3 and their order, so that a
# 15-minute lease can split them over two calls of under 10 minutes: e.g. CHECKS=train, then CHECKS="decode
# cells"; checked before the GPU is touched
checks=" ${CHECKS:-train cells decode} "
for c in $checks; do
    case $c in train|cells|decode|atr) ;; *) echo "CHECKS: unknown check '$c' (train, cells, decode, atr)"; exit 2 ;; esac
done
mkdir -p bench-cuda
source "$(dirname "$0")/common.sh"
gpu_start "$out"
quiet() { grep -v "USDT\|profiler_st" "$1" | tail -n "$2"; }
# BUDGET (environment, default 580): the seconds this call may take, which a lease's second call must set to
# what its first left (the run tool's limit_s is less than its timeout_s where less device time is left)
budget=${BUDGET:-580}
# seconds left of the call's budget, at least 1 (timeout 0 would mean no limit)
left() { local n=$(( budget - ($(date +%s) - t0) )); echo $(( n > 0 ? n : 1 )); }
# a check's limit: its own N seconds, or what is left of the budget less 10 s for packing, if that is less
within() { local n=$(( $(left) - 10 )); n=$(( n > 0 ? n : 1 )); echo $(( $1 < n ? $1 : n )); }
# bench.tgz after every check, written whole or not at all, so a call cut short still brings back the checks
# that finished
pack() { tar czf "$out/bench.tgz.part" bench-cuda && mv "$out/bench.tgz.part" "$out/bench.tgz"; }

check_train() {
    if [ -n "$baseline" ]; then
        stamp "1a. bench train --size paper --profile, engine of $baseline"
        # from the baseline's own tree (its src/'s parent, with its workflow/ and config.yaml): the rows are its
        # tables' systems, read through its own config schema
        base_src=$(cd "$baseline" && pwd)
        (cd "$baseline/.." && PYTHONPATH="$base_src:${PYTHONPATH:-}" timeout "$(within 150)" python3 -m rnmt bench train --size paper \
            --profile --device cuda --out "$OLDPWD/bench-cuda/before") > bench-cuda/train-paper-before.log 2>&1
        echo "exit $?"; quiet bench-cuda/train-paper-before.log 16
    fi
    stamp "1b. bench train --size paper --profile --graphs, this checkout's engine"
    timeout "$(within 240)" python3 -m rnmt bench train --size paper --profile --graphs --device cuda \
        --out bench-cuda/after > bench-cuda/train-paper-after.log 2>&1
    echo "exit $?"; quiet bench-cuda/train-paper-after.log 24
}

check_atr() {
    stamp "1c. RNNSearch+ATR at paper sizes, eager and replayed, profiled; the graph's paths timed as replays"
    # a script file, not stdin: bench train spawns a process a row, which imports the main module's file
    cat > bench-cuda/train-atr.py <<'EOF'
import logging

import torch

from rnmt.bench.table import write_csv
from rnmt.bench.train import bench

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")   # bench's progress lines
    rows = bench(torch.device("cuda"), systems=("RNNSearch+ATR",), size="paper", profile=True, graphs=True)
    write_csv(rows, "bench-cuda/train-atr.csv")
    for r in rows:
        print(r["system"], "eager", round(r["tgt_words_per_s"]), "replayed", r.get("graph_tgt_words_per_s"),
              r.get("graph_failed", ""), "|", r.get("graph_paths"), "|", r.get("graph_heaviest_kernels"), flush=True)
EOF
    RNMT_FASTPATH_CACHE=bench-cuda/fast-paths-atr.json timeout "$(within 150)" python3 bench-cuda/train-atr.py \
        > bench-cuda/train-atr.log 2>&1
    echo "exit $?"; quiet bench-cuda/train-atr.log 6
}

check_cells() {
    stamp "2. ATR's recurrence against cuDNN's GRU at hidden 1000, per-step kernels and persistent, float32 and bfloat16"
    # the run with RNMT_ATR_PERSISTENT=auto lets ATR take the fastest of its ways (per step, persistent in two
    # tilings): their times in fast-paths-cells.json (`medians_ms`)
    RNMT_FASTPATH_CACHE=bench-cuda/fast-paths-cells.json timeout "$(within 140)" python3 - > bench-cuda/cells-1000.log 2>&1 <<'EOF'
import os
import sys
import traceback

import torch
from rnmt.bench.cells import bench
from rnmt.bench.table import format_table, write_csv

failed = []
# bfloat16 first (the issue's comparison), each run on its own: one that fails (a refused cooperative launch)
# leaves the others to run
for persistent, cells, precision, name in (("1", ["atr", "gru"], "bfloat16", "cells-1000-persistent-bf16"),
                                           ("auto", ["atr"], "bfloat16", "cells-1000-auto-bf16"),
                                           ("0", ["atr", "gru", "sru", "srnmt"], "float32", "cells-1000"),
                                           ("1", ["atr"], "float32", "cells-1000-persistent"),
                                           ("0", ["lgru", "tgru"], "float32", "cells-1000-gated")):
    os.environ["RNMT_ATR_PERSISTENT"] = persistent
    print(f"RNMT_ATR_PERSISTENT={persistent}, {precision}", flush=True)
    try:
        rows = bench(torch.device("cuda"), hidden=(1000,), cells=cells, precision=precision)
    except Exception:
        traceback.print_exc()
        failed.append(name)
        continue
    write_csv([{**r, "atr_persistent": persistent} for r in rows], f"bench-cuda/{name}.csv")
    print(format_table(rows, ("cell", "path", "precision", "hidden", "tokens_per_s", "ratio_to_nn_gru", "gflops")),
          flush=True)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
EOF
    echo "exit $?"; tail -n 20 bench-cuda/cells-1000.log
}

check_decode() {
    stamp "3. rnmt bench decode --size paper --graphs --profile --tf32 --device cuda"
    timeout "$(within 170)" python3 -m rnmt bench decode --size paper --graphs --profile --tf32 --device cuda \
        --out bench-cuda \
        > bench-cuda/decode-paper.log 2>&1
    echo "exit $?"; tail -n 12 bench-cuda/decode-paper.log
    pack
    timeout "$(within 60)" python3 -m rnmt bench decoder --device cuda --out bench-cuda > bench-cuda/decoder.log 2>&1
    echo "exit $?"; tail -n 8 bench-cuda/decoder.log
}

for c in $checks; do
    "check_$c"
    pack
done

if [ "$tables" = skip ]; then
    stamp "done"
    exit 0
fi
if [ "$tables" = none ]; then
    stamp "4. pytest -m cuda"
    cuda_tests "$out" "$(left)"
    echo "pytest exit $?"; tail -n 30 "$out/cuda-tests.log"
    stamp "done"
    exit 0
fi
run=mini-gpu
cap=$(( $(left) > 20 ? $(left) - 20 : 1 ))
targets=""
jobs=0
for t in $tables; do
    targets="$targets results/$run/tables/$t.csv"
    jobs=$(( jobs + $(grep -c "variant:" "workflow/experiments/$t.yaml") ))
done
# every row trains the scale's seeds (config.yaml scales.mini.seeds): one job a seed, all on the GPU at once
seeds=$(python3 -c "import yaml; print(yaml.safe_load(open('config.yaml'))['scales']['mini'].get('seeds') or 1)")
jobs=$(( jobs * seeds ))
stamp "4. $tables at scale mini, $jobs rows on the GPU, override '$override', for at most $cap s; pytest -m cuda beside"
nvidia-smi dmon -s um -d 5 > "results/$run.dmon.txt" 2>&1 &
dmon=$!
# the targets first: --resources and --config take every word after them
RNMT_JOBS_PER_GPU=$jobs timeout "$cap" python3 -m snakemake $targets --cores 16 --keep-going \
    --resources gpu="$jobs" --config scale=mini run=$run ${override:+"override=$override"} \
    > "results/$run.snakemake.log" 2>&1 &
smk=$!
cuda_tests "$out" 240
echo "pytest exit $?"; tail -n 30 "$out/cuda-tests.log"
wait $smk
rc=$?
kill "$dmon" 2>/dev/null
stamp "snakemake exit $rc"
tail -n 15 "results/$run.snakemake.log"
for t in $tables; do cat "results/$run/tables/$t.md" 2>/dev/null; done
tar czf "$out/table.tgz" --exclude='*.pt' --exclude='*.keep' --exclude="results/$run/data" \
    "results/$run" "results/$run.snakemake.log" "results/$run.dmon.txt" 2>/dev/null
stamp "done"
