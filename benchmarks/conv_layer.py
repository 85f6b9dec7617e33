"""A conv layer's forward and backward: ``needle.ops.conv`` against the same im2col computation by hand.

The hand-written version is what a numpy (or CuPy) user would write: pad, a strided im2col view
copied into a matrix, one product for the output; for the backward ``cols.T @ G`` for the weight
and ``G @ W.T`` scattered back over the K*K kernel offsets (col2im) for the input. Both compute
the output, the input gradient (except for a first layer, whose input is the images) and the
weight gradient from the same arrays; needle's backward is ``backward(create_graph=False)``, the
training loop's path. The shapes are the conv layers of ``examples/mnist_models.py``'s CNN, batch
128. Each repeat times both, in alternating order; the report gives the median of each and the
median of the per-repeat ratios.

    python benchmarks/conv_layer.py [--device cpu|cuda] [--repeats 15] [--batch-size 128]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import ops  # noqa: E402


class Layer(NamedTuple):
    name: str
    size: int  # input height = width
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    input_needs_grad: bool


# The CNN of examples/mnist_models.py (make_model("cnn")), layer by layer.
LAYERS = [
    Layer("conv1 28x28 1->32 k5 s2", 28, 1, 32, 5, 2, False),
    Layer("conv2 14x14 32->64 k3 s2", 14, 32, 64, 3, 2, True),
    Layer("conv3 7x7 64->64 k3 s1", 7, 64, 64, 3, 1, True),
]


def hand_written(xp, x, w, grad_out, stride, padding, input_needs_grad):
    """Forward and backward of one conv layer, im2col by hand; returns (out, grad_x or None, grad_w)."""
    padded = xp.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    batch, height, width, channels = padded.shape
    kernel, out_channels = w.shape[0], w.shape[3]
    rows, cols = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    sb, sh, sw, sc = padded.strides
    windows = xp.lib.stride_tricks.as_strided(
        padded, (batch, rows, cols, kernel, kernel, channels), (sb, sh * stride, sw * stride, sh, sw, sc)
    )
    matrix = windows.reshape(batch * rows * cols, kernel * kernel * channels)
    weight = w.reshape(-1, out_channels)
    out = (matrix @ weight).reshape(batch, rows, cols, out_channels)
    grad = grad_out.reshape(-1, out_channels)
    grad_w = (matrix.T @ grad).reshape(w.shape)
    grad_x = None
    if input_needs_grad:
        grad_windows = (grad @ weight.T).reshape(batch, rows, cols, kernel, kernel, channels)
        grad_padded = xp.zeros_like(padded)
        for i in range(kernel):
            for j in range(kernel):
                grad_padded[:, i : i + stride * rows : stride, j : j + stride * cols : stride, :] += grad_windows[:, :, :, i, j, :]
        grad_x = grad_padded[:, padding : height - padding, padding : width - padding, :]
    return out, grad_x, grad_w


def needle_step(device, x, w, grad_out, stride, padding, input_needs_grad):
    images = ndl.Tensor(x, device=device, requires_grad=input_needs_grad)
    weight = ndl.Tensor(w, device=device)
    out = ops.conv(images, weight, stride=stride, padding=padding)
    out.backward(ndl.Tensor(grad_out, device=device, requires_grad=False), create_graph=False)
    grad_x = images.grad.realize_cached_data().raw if input_needs_grad else None
    return out.realize_cached_data().raw, grad_x, weight.grad.realize_cached_data().raw


def measure(layer, device, batch_size, repeats, synchronize):
    xp = device.xp
    rng = np.random.default_rng(0)
    padding = layer.kernel // 2
    rows = (layer.size + 2 * padding - layer.kernel) // layer.stride + 1
    x = xp.asarray(rng.normal(size=(batch_size, layer.size, layer.size, layer.in_channels)).astype(np.float32))
    w = xp.asarray(rng.normal(size=(layer.kernel, layer.kernel, layer.in_channels, layer.out_channels)).astype(np.float32))
    grad_out = xp.asarray(rng.normal(size=(batch_size, rows, rows, layer.out_channels)).astype(np.float32))
    args = (x, w, grad_out, layer.stride, padding, layer.input_needs_grad)
    runners = {"hand": lambda: hand_written(xp, *args), "needle": lambda: needle_step(device, *args)}
    for want, got in zip(runners["hand"](), runners["needle"]()):  # same answers (and a warm-up)
        if want is not None:
            scale = float(xp.abs(want).max())
            assert float(xp.abs(want - got).max()) <= 1e-4 * scale, f"{layer.name}: needle and numpy disagree"
    seconds = {"hand": [], "needle": []}
    order = list(runners)
    for repeat in range(repeats):
        # NOTE: the order alternates so that a machine slowing down does not always hit one side.
        for name in order if repeat % 2 == 0 else order[::-1]:
            synchronize()
            start = time.perf_counter()
            runners[name]()
            synchronize()
            seconds[name].append(time.perf_counter() - start)
    ratios = [ours / theirs for ours, theirs in zip(seconds["needle"], seconds["hand"])]
    return statistics.median(seconds["hand"]), statistics.median(seconds["needle"]), statistics.median(ratios)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args(argv)
    device = ndl.cpu() if args.device == "cpu" else ndl.cuda()
    synchronize = device.xp.cuda.Device().synchronize if args.device == "cuda" else (lambda: None)
    hand_name = "numpy" if args.device == "cpu" else "CuPy"
    print(f"conv forward + backward, batch {args.batch_size}, {args.device}, median of {args.repeats} paired repeats")
    print(f"| layer | {hand_name} by hand (ms) | needle (ms) | needle / hand |")
    print("|---|---:|---:|---:|")
    for layer in LAYERS:
        hand, ours, ratio = measure(layer, device, args.batch_size, args.repeats, synchronize)
        print(f"| {layer.name} | {hand * 1e3:.2f} | {ours * 1e3:.2f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
