#!/usr/bin/env bash
# Everything a GPU session checks, in one go: the CUDA test cases, the GPU benchmark, the memory
# monitor's overhead on CUDA, the main job on CUDA, the LSTM step benchmark and the sequential-MNIST
# LSTM on CUDA. Outputs go to OUTDIR (default ./gpu-check-out), one file each; a summary is printed
# at the end.
#   bash benchmarks/gpu_check.sh [OUTDIR]
# Runs the checkout's needle (PYTHONPATH=.); needs CuPy, an NVIDIA GPU, pytest; torch optional.
set -u
cd "$(dirname "$0")/.."
out="${1:-gpu-check-out}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
{ nvidia-smi -L; python -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"; } > "$out/gpu.txt" 2>&1
timeout 180 python -m pytest -q -p no:cacheprovider -k cuda tests > "$out/pytest_cuda.txt" 2>&1
echo "pytest exit $?" >> "$out/pytest_cuda.txt"
timeout 240 python benchmarks/mnist_mlp.py --device cuda --preset gpu --repeats 3 \
    --only numpy,torch,needle,needle-course --markdown > "$out/bench_cuda.txt" 2>&1
echo "benchmark exit $?" >> "$out/bench_cuda.txt"
# ndl.compile as CUDA graph launches on the launch-bound MNIST sizes (goal: half of torch eager's time)
timeout 240 python benchmarks/mnist_mlp.py --device cuda --preset cpu --repeats 3 \
    --only numpy,torch,needle,needle-compiled --markdown > "$out/bench_cuda_compiled.txt" 2>&1
echo "compiled benchmark exit $?" >> "$out/bench_cuda_compiled.txt"
timeout 60 python examples/train_mnist.py --device cuda --epochs 1 --compile --no-progress > "$out/train_cuda_compiled.txt" 2>&1
echo "train compiled exit $?" >> "$out/train_cuda_compiled.txt"
timeout 60 python benchmarks/monitor_overhead.py --device cuda --repeats 5 > "$out/monitor_overhead_cuda.txt" 2>&1
timeout 60 python benchmarks/conv_layer.py --device cuda --repeats 15 > "$out/conv_layer_cuda.txt" 2>&1
echo "conv benchmark exit $?" >> "$out/conv_layer_cuda.txt"
timeout 60 python examples/train_mnist.py --device cuda --epochs 2 --no-progress > "$out/train_cuda.txt" 2>&1
echo "train exit $?" >> "$out/train_cuda.txt"
timeout 300 python examples/train_mnist.py --model cnn --device cuda --epochs 2 --no-progress > "$out/train_cnn_cuda.txt" 2>&1
echo "train cnn exit $?" >> "$out/train_cnn_cuda.txt"
timeout 120 python benchmarks/lstm_step.py --device cuda --repeats 20 > "$out/lstm_step_cuda.txt" 2>&1
echo "lstm benchmark exit $?" >> "$out/lstm_step_cuda.txt"
timeout 240 python examples/train_mnist.py --model lstm --device cuda --epochs 3 --batch-size 64 --lr 2e-3 \
    --no-progress > "$out/train_lstm_cuda.txt" 2>&1
echo "train lstm exit $?" >> "$out/train_lstm_cuda.txt"
cat "$out/gpu.txt"
tail -3 "$out/pytest_cuda.txt"
sed -n '/^| config/,$p' "$out/bench_cuda.txt"
tail -2 "$out/bench_cuda.txt"
sed -n '/^| config/,$p' "$out/bench_cuda_compiled.txt"
tail -4 "$out/train_cuda_compiled.txt"
tail -5 "$out/monitor_overhead_cuda.txt"
tail -6 "$out/conv_layer_cuda.txt"
tail -4 "$out/train_cuda.txt"
tail -4 "$out/train_cnn_cuda.txt"
tail -4 "$out/lstm_step_cuda.txt"
tail -4 "$out/train_lstm_cuda.txt"
