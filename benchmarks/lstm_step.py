#!/usr/bin/env python
"""One LSTM training step (forward and backward over a whole sequence): needle's nn.LSTM against
the same step written by hand in numpy (CuPy with ``--device cuda``).

Both compute the output of a one-layer LSTM over (seq_len, batch, input) and the gradients of
``sum(output * G)`` with respect to W_ih, W_hh and the biases. The hand-written step projects
the whole input sequence with one matrix product, then runs the recurrence; its backward is the
textbook BPTT loop. Before timing, the script checks that both give the same gradients.

Each repeat times both, in alternating order; the ratio is needle / hand-written per repeat,
and the medians are printed.

    python benchmarks/lstm_step.py                  # batch 64, input 28, hidden 128, seq 28
    python benchmarks/lstm_step.py --device cuda --repeats 30
"""
import argparse
import importlib.util
import sys
import time
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import nn  # noqa: E402


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--input", type=int, default=28)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=15, help="paired repeats (default: 15)")
    parser.add_argument(
        "--create-graph", action="store_true", help="backward(create_graph=True): the course's path, its gradients keeping the graph"
    )
    return parser.parse_args(argv)


class HandWrittenLSTM:
    """A one-layer LSTM step in plain array code (gates i, f, g, o; weights in needle's layout)."""

    def __init__(self, xp, weight_ih, weight_hh, bias):
        self.xp, self.weight_ih, self.weight_hh, self.bias = xp, weight_ih, weight_hh, bias

    def step(self, X, upstream):
        """Forward over X (T, B, I), backward of sum(output * upstream); returns (dW_ih, dW_hh, dbias)."""
        xp = self.xp
        steps, batch, _ = X.shape
        hidden = self.weight_hh.shape[0]
        projected = (X.reshape(steps * batch, -1) @ self.weight_ih + self.bias).reshape(steps, batch, 4 * hidden)
        h = xp.zeros((batch, hidden), dtype=X.dtype)
        c = xp.zeros_like(h)
        hs, cs, activations, tanh_cs = [h], [c], [], []
        for t in range(steps):
            gates = projected[t] + h @ self.weight_hh
            activated = 1 / (1 + xp.exp(-gates))
            activated[:, 2 * hidden : 3 * hidden] = xp.tanh(gates[:, 2 * hidden : 3 * hidden])
            i, f, g, o = (activated[:, k * hidden : (k + 1) * hidden] for k in range(4))
            c = f * c + i * g
            tanh_c = xp.tanh(c)
            h = o * tanh_c
            hs.append(h)
            cs.append(c)
            activations.append(activated)
            tanh_cs.append(tanh_c)
        grad_h = xp.zeros_like(h)
        grad_c = xp.zeros_like(h)
        grad_gates_all = xp.empty_like(projected)
        grad_weight_hh = xp.zeros_like(self.weight_hh)
        for t in reversed(range(steps)):
            activated, tanh_c = activations[t], tanh_cs[t]
            i, f, g, o = (activated[:, k * hidden : (k + 1) * hidden] for k in range(4))
            grad_h = grad_h + upstream[t]
            grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c)
            grad_gates = grad_gates_all[t]
            grad_gates[:, :hidden] = grad_c * g * i * (1 - i)
            grad_gates[:, hidden : 2 * hidden] = grad_c * cs[t] * f * (1 - f)
            grad_gates[:, 2 * hidden : 3 * hidden] = grad_c * i * (1 - g * g)
            grad_gates[:, 3 * hidden :] = grad_h * tanh_c * o * (1 - o)
            grad_weight_hh += hs[t].T @ grad_gates
            grad_h = grad_gates @ self.weight_hh.T
            grad_c = grad_c * f
        flat_grads = grad_gates_all.reshape(steps * batch, 4 * hidden)
        grad_weight_ih = X.reshape(steps * batch, -1).T @ flat_grads
        return grad_weight_ih, grad_weight_hh, flat_grads.sum(axis=0)


def main(argv=None):
    args = parse_arguments(argv)
    device = ndl.cpu() if args.device == "cpu" else ndl.cuda()
    xp = device.xp
    synchronize = (lambda: None) if args.device == "cpu" else xp.cuda.Device().synchronize
    rng = np.random.default_rng(0)
    np.random.seed(0)
    lstm = nn.LSTM(args.input, args.hidden, device=device)
    cell = lstm.lstm_cells[0]
    X_host = rng.normal(size=(args.seq, args.batch, args.input)).astype(np.float32)
    upstream_host = rng.normal(size=(args.seq, args.batch, args.hidden)).astype(np.float32)
    X = ndl.Tensor(X_host, device=device, requires_grad=False)
    upstream = ndl.Tensor(upstream_host, device=device, requires_grad=False)
    weights = [p.realize_cached_data().raw for p in (cell.W_ih, cell.W_hh, cell.bias_ih, cell.bias_hh)]
    reference = HandWrittenLSTM(xp, weights[0], weights[1], weights[2] + weights[3])
    X_raw, upstream_raw = X.realize_cached_data().raw, upstream.realize_cached_data().raw

    def needle_step():
        for parameter in lstm.parameters():
            parameter.grad = None
        output, _ = lstm(X)
        output.backward(upstream, create_graph=args.create_graph)
        return cell.W_ih.grad, cell.W_hh.grad, cell.bias_ih.grad

    def reference_step():
        return reference.step(X_raw, upstream_raw)

    got = [g.numpy() for g in needle_step()]
    want = [xp.asnumpy(g) if hasattr(xp, "asnumpy") else g for g in reference_step()]
    for name, a, b in zip(("W_ih", "W_hh", "bias"), got, want):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4, err_msg=f"needle and hand-written {name} gradients differ")

    def timed(step):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        return time.perf_counter() - start

    for _ in range(3):  # warm up both
        timed(needle_step)
        timed(reference_step)
    needle_times, reference_times, ratios = [], [], []
    for repeat in range(args.repeats):
        order = (needle_step, reference_step) if repeat % 2 == 0 else (reference_step, needle_step)
        seconds = {step: timed(step) for step in order}
        needle_times.append(seconds[needle_step])
        reference_times.append(seconds[reference_step])
        ratios.append(seconds[needle_step] / seconds[reference_step])
    path = "create_graph=True" if args.create_graph else "create_graph=False"
    print(
        f"LSTM step on {device}: batch {args.batch}, input {args.input}, hidden {args.hidden}, seq {args.seq}; "
        f"needle backward({path}); {args.repeats} paired repeats (gradients checked equal first)"
    )
    print(f"hand-written   median {np.median(reference_times) * 1e3:8.2f} ms")
    print(f"needle nn.LSTM median {np.median(needle_times) * 1e3:8.2f} ms")
    print(f"ratio needle / hand-written: median {np.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
    return float(np.median(ratios))


if __name__ == "__main__":
    main()
