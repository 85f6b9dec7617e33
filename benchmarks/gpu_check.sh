#!/usr/bin/env bash
# Everything a GPU session checks, in one go, most important first: the compiled step on CUDA
# (its tests, then its time against eager PyTorch: issue 19 point 4), the MNIST benchmark of
# every path, the CUDA test cases, the main job on CUDA (compiled and not), then the memory
# monitor's overhead, the conv layer and the LSTM step. Outputs go to OUTDIR (default
# ./gpu-check-out), one file each; a summary is printed at the end.
#   bash benchmarks/gpu_check.sh [OUTDIR] [BUDGET_SECONDS]
# BUDGET_SECONDS (default 1500) bounds the whole run: a step whose own limit would overrun it is
# skipped and says so, so a short device lease still gets the first steps whole.
# GPU_CHECK_ONLY="name ..." runs only the steps of those names (a rerun of what changed).
# Runs the checkout's needle (PYTHONPATH=.); needs CuPy, an NVIDIA GPU, pytest; torch optional.
set -u
cd "$(dirname "$0")/.."
out="${1:-gpu-check-out}"
budget="${2:-1500}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
started=$SECONDS

# step NAME LIMIT COMMAND...: run COMMAND into $out/NAME.txt with a time limit, if the budget allows.
step() {
    local name="$1" limit="$2"
    shift 2
    if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then
        echo "skipped: not in GPU_CHECK_ONLY" > "$out/$name.txt"
        return
    fi
    if (( SECONDS - started + limit > budget )); then
        echo "skipped: ${limit} s would pass the ${budget} s budget ($((SECONDS - started)) s used)" > "$out/$name.txt"
        return
    fi
    local begun=$SECONDS
    timeout "$limit" "$@" > "$out/$name.txt" 2>&1
    echo "exit $? after $((SECONDS - begun)) s" >> "$out/$name.txt"
}

{ nvidia-smi -L; python -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
  python -c "import torch; print('torch', torch.__version__)"; python -V; } > "$out/gpu.txt" 2>&1
step pytest_cuda_replay 150 python -m pytest -q -p no:cacheprovider tests/compile/test_cuda_replay.py \
    tests/compile/test_cuda_graph.py tests/compile/test_cuda_fallback.py tests/backend/test_captured_gemm.py
for size in "512 128" "128 32"; do
    set -- $size
    step "compiled_step_h$1_b$2" 90 python benchmarks/compiled_step.py --device cuda --hidden "$1" --batch-size "$2" \
        --blocks 11 --steps 100 --paths torch,compiled,needle,course,floor --reference torch
done
step bench_cuda 200 python benchmarks/mnist_mlp.py --device cuda --preset cpu --repeats 3 \
    --only numpy,torch,needle,needle-course,needle-compiled --markdown
step train_cuda_compiled 60 python examples/train_mnist.py --device cuda --epochs 1 --compile --no-progress
step train_cuda 60 python examples/train_mnist.py --device cuda --epochs 1 --no-progress
# (the notebook tests need Jupyter, which the GPU machine lacks; they run in CI)
step pytest_cuda 240 python -m pytest -q -p no:cacheprovider -k cuda tests --ignore=tests/notebooks
step monitor_overhead_cuda 60 python benchmarks/monitor_overhead.py --device cuda --repeats 5
step conv_layer_cuda 60 python benchmarks/conv_layer.py --device cuda --repeats 15
step lstm_step_cuda 90 python benchmarks/lstm_step.py --device cuda --repeats 20
step bench_cuda_large 150 python benchmarks/mnist_mlp.py --device cuda --hidden 4096 --batch-size 1024 --epochs 3 \
    --repeats 3 --only numpy,torch,needle,needle-course --markdown
step train_cnn_cuda 300 python examples/train_mnist.py --model cnn --device cuda --epochs 2 --no-progress
step train_lstm_cuda 240 python examples/train_mnist.py --model lstm --device cuda --epochs 3 --batch-size 64 \
    --lr 2e-3 --no-progress

cat "$out/gpu.txt"
for name in pytest_cuda_replay pytest_cuda; do echo "== $name"; tail -4 "$out/$name.txt"; done
for file in "$out"/compiled_step_*.txt; do echo "== $(basename "$file")"; cat "$file"; done
for name in bench_cuda bench_cuda_large; do
    echo "== $name"; sed -n '/^| config/,$p' "$out/$name.txt"; tail -2 "$out/$name.txt"
done
for name in train_cuda_compiled train_cuda monitor_overhead_cuda conv_layer_cuda lstm_step_cuda train_cnn_cuda train_lstm_cuda; do
    echo "== $name"; tail -5 "$out/$name.txt"
done
echo "gpu_check: $((SECONDS - started)) s"
