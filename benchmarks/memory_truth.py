"""Does ``live_bytes`` report the memory? Loops that leak every step, measured three ways.

Each loop keeps every iteration's loss with its graph (``losses.append(loss)``), the leak the
monitor exists to find, and steps an optimizer. Per iteration it reads needle's counter
(``snapshot().live_bytes``), the bytes that Python and numpy really hold (``tracemalloc``: numpy
reports its buffers to it), and the process's resident set (RSS, from /proc). The table prints
the ratio of needle's growth per iteration to each real growth; 1.00 is the truth.

    PYTHONPATH=. python benchmarks/memory_truth.py [--steps N]

The models are small but their arrays outweigh the Python objects of their graphs (a few
hundred bytes a node, which no array counter sees), as in real training. tests/test_memory_truth.py
asserts the tracemalloc ratio for every model and backward path from the same loops.
"""
import argparse
import ctypes
import gc
import os
import tracemalloc

import numpy as np

import needle as ndl
from needle import nn

BACKWARD_PATHS = {"backward()": {}, "backward(create_graph=False)": {"create_graph": False}}


class _Classifier(nn.Module):
    """A model with its batch: ``loss()`` is one forward pass to a scalar loss."""

    def __init__(self, model, make_batch, labels):
        super().__init__()
        self.model = model
        self.make_batch = make_batch
        self.labels = labels
        self.loss_fn = nn.SoftmaxLoss()

    def loss(self):
        return self.loss_fn(self.model(self.make_batch()), self.labels)


class _SequenceClassifier(nn.Module):
    def __init__(self, recurrent, hidden, classes):
        super().__init__()
        self.recurrent = recurrent
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        output, _ = self.recurrent(x)
        steps, batch, hidden = output.shape
        return self.head(output.reshape((steps * batch, hidden)))


class _LanguageModel(nn.Module):
    def __init__(self, vocabulary, dim, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, dim)
        self.lstm = nn.LSTM(dim, hidden)
        self.head = nn.Linear(hidden, vocabulary)

    def forward(self, words, state=None):
        output, state = self.lstm(self.embedding(words), state)
        steps, batch, hidden = output.shape
        return self.head(output.reshape((steps * batch, hidden))), state


def _images(rng, shape):
    # NOTE: a fresh numpy batch each step, as a data loader gives; the model may keep a view of it.
    return lambda: ndl.Tensor(rng.standard_normal(shape).astype("float32"), requires_grad=False)


def _labels(rng, count, classes):
    return ndl.Tensor(rng.integers(0, classes, count), dtype="int64", requires_grad=False)


def mlp(rng):
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return _Classifier(model, _images(rng, (256, 256)), _labels(rng, 256, 10))


def mlp_batchnorm_dropout(rng):
    model = nn.Sequential(
        nn.Linear(256, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 10)
    )
    return _Classifier(model, _images(rng, (256, 256)), _labels(rng, 256, 10))


def conv_batchnorm(rng):
    model = nn.Sequential(
        nn.Conv(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv(16, 16, 3, stride=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10),
    )
    return _Classifier(model, _images(rng, (32, 3, 16, 16)), _labels(rng, 32, 10))


def lstm_classifier(rng):
    model = _SequenceClassifier(nn.LSTM(32, 128), 128, 10)
    return _Classifier(model, _images(rng, (12, 32, 32)), _labels(rng, 12 * 32, 10))


def rnn(rng):
    model = _SequenceClassifier(nn.RNN(32, 256), 256, 10)
    return _Classifier(model, _images(rng, (12, 32, 32)), _labels(rng, 12 * 32, 10))


class _WordBatches:
    def __init__(self, rng, vocabulary, steps, batch):
        self.rng, self.vocabulary, self.shape = rng, vocabulary, (steps, batch)

    def words(self):
        return ndl.Tensor(self.rng.integers(0, self.vocabulary, self.shape), dtype="int64", requires_grad=False)

    def targets(self):
        return _labels(self.rng, self.shape[0] * self.shape[1], self.vocabulary)


class _LanguageModelLoop(nn.Module):
    """Embedding + LSTM language model; with ``carry`` the LSTM state goes into the next step undetached."""

    def __init__(self, rng, carry):
        super().__init__()
        self.model = _LanguageModel(200, 32, 128)
        self.batches = _WordBatches(rng, 200, 12, 32)
        self.carry = carry
        self.state = None
        self.loss_fn = nn.SoftmaxLoss()

    def loss(self):
        logits, state = self.model(self.batches.words(), self.state)
        if self.carry:
            self.state = state  # NOTE: the leak: h and c keep every earlier step's graph
        return self.loss_fn(logits, self.batches.targets())


def language_model(rng):
    return _LanguageModelLoop(rng, carry=False)


def carried_lstm_state(rng):
    return _LanguageModelLoop(rng, carry=True)


MODELS = {
    "MLP": mlp,
    "MLP + BatchNorm1d + Dropout": mlp_batchnorm_dropout,
    "Conv + BatchNorm2d CNN": conv_batchnorm,
    "LSTM classifier": lstm_classifier,
    "Embedding + LSTM language model": language_model,
    "RNN": rnn,
    "carried LSTM state": carried_lstm_state,
}


def _rss_bytes():
    """The resident set in bytes, after handing freed heap memory back (glibc's malloc_trim), or 0."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: RSS may then lag the allocations that reuse freed memory
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def measure(model_name, backward_kwargs, *, steps=6, warmup=2, call_backward=True, trace=True, seed=0):
    """Growth per leaking iteration: ``{"live_bytes": ..., "tracemalloc": ..., "rss": ...}`` in bytes.

    ``warmup`` iterations first (unkept, so optimizer state and caches exist), then ``steps``
    kept ones; the growth is taken from the end of the first kept iteration to the end of the
    last, so that one-time allocations of the first do not count. With ``trace=False``
    tracemalloc stays off (its own bookkeeping would show in RSS) and reads 0.
    """
    rng = np.random.default_rng(seed)
    loop = MODELS[model_name](rng)
    optimizer = ndl.optim.SGD(loop.parameters(), lr=1e-3)

    def iteration():
        loss = loop.loss()
        if call_backward:
            optimizer.reset_grad()
            loss.backward(**backward_kwargs)
            optimizer.step()
        return loss

    for _ in range(warmup):
        iteration()
    if isinstance(loop, _LanguageModelLoop):
        loop.state = None
    gc.collect()
    kept = []
    was_tracing = tracemalloc.is_tracing() or not trace
    if not was_tracing:
        tracemalloc.start()
    try:
        kept.append(iteration())
        gc.collect()
        start = (ndl.autograd.snapshot().live_bytes, tracemalloc.get_traced_memory()[0], _rss_bytes())
        for _ in range(steps - 1):
            kept.append(iteration())
        gc.collect()
        end = (ndl.autograd.snapshot().live_bytes, tracemalloc.get_traced_memory()[0], _rss_bytes())
    finally:
        if not was_tracing:
            tracemalloc.stop()
    per_step = [(after - before) / (steps - 1) for before, after in zip(start, end)]
    del kept
    return dict(zip(("live_bytes", "tracemalloc", "rss"), per_step))


def _ratio(numerator, denominator):
    return numerator / denominator if denominator > 0 else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="kept iterations per measurement (default 8)")
    args = parser.parse_args()
    print(f"{'model':<32} {'path':<29} {'KB/iter':>8} {'vs tracemalloc':>14} {'vs RSS':>7}")
    rows = [(name, path, kwargs, True) for name in MODELS for path, kwargs in BACKWARD_PATHS.items()]
    rows += [(name, "no backward (losses kept)", {}, False) for name in ("MLP", "LSTM classifier")]
    for name, path, kwargs, call_backward in rows:
        traced = measure(name, kwargs, steps=args.steps, call_backward=call_backward)
        untraced = measure(name, kwargs, steps=args.steps, call_backward=call_backward, trace=False)
        print(
            f"{name:<32} {path:<29} {traced['live_bytes'] / 1e3:>8.1f} "
            f"{_ratio(traced['live_bytes'], traced['tracemalloc']):>14.2f} "
            f"{_ratio(untraced['live_bytes'], untraced['rss']):>7.2f}"
        )


if __name__ == "__main__":
    main()
