#!/usr/bin/env bash
# Seconds per epoch of the main job (examples/train_mnist.py with its defaults: MLP 784-256-10,
# Adam, batch 128, all 60,000 images) under each BLAS thread count: 1, 2, and unset (numpy's BLAS
# then starts one thread per core).
#
# Usage: benchmarks/main_job_time.sh [RUNS] [EPOCHS]     (default: 3 runs of 2 epochs per setting)
#
# Each line is one run: the thread setting, then the mean seconds per epoch that the script itself
# measures (Trainer's per-epoch clock: training steps only, no start-up, no data loading, no test
# evaluation). The load average is printed before and after: on a shared machine, other jobs'
# load changes the figures more than anything here, so quote a range over several runs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
epochs=${2:-2}
blas=$(python -c "import numpy; c = numpy.show_config(mode='dicts'); print(c['Build Dependencies']['blas']['name'])" 2>/dev/null || echo unknown)
echo "machine: $(nproc) cores; numpy $(python -c 'import numpy; print(numpy.__version__)') with BLAS '$blas'; python $(python -c 'import platform; print(platform.python_version())')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
for threads in 1 2 unset; do
    for run in $(seq "$runs"); do
        if [ "$threads" = unset ]; then
            output=$(env -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS -u MKL_NUM_THREADS \
                python examples/train_mnist.py --no-progress --epochs "$epochs")
        else
            output=$(OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
                python examples/train_mnist.py --no-progress --epochs "$epochs")
        fi
        seconds=$(printf '%s\n' "$output" | awk '/^seconds per epoch/ {print $4}')
        echo "BLAS threads=$threads run $run: $seconds s per epoch"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
