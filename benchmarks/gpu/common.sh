# What the GPU scripts share (sourced): the log to OUT/run.log, a clock, and OUT/env.txt describing the machine.
#   gpu_start OUT
gpu_start() {
    mkdir -p "$1"
    exec > >(tee -a "$1/run.log") 2>&1
    t0=$(date +%s)
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
        python3 -c 'import torch, triton, platform; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, "python", platform.python_version(), torch.cuda.get_device_name(0))'
        nproc
        grep -m1 "model name" /proc/cpuinfo
    } > "$1/env.txt" 2>&1
    cat "$1/env.txt"
}
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
# pytest -m cuda, every error the CUDA tests measure kept: OUT/cuda-tests.log and OUT/cuda-tests.jsonl
#   cuda_tests OUT LIMIT_SECONDS
cuda_tests() {
    RNMT_CUDA_REPORT="$1/cuda-tests.jsonl" timeout "$2" python3 -m pytest -m cuda tests/test_cuda.py -q \
        -p no:cacheprovider -rs > "$1/cuda-tests.log" 2>&1
}
