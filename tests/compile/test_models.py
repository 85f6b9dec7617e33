"""ndl.compile on the course's other models: a CNN (convolutions, BatchNorm2d) and an LSTM, replayed
bitwise as eager. Their ops build arrays that an MLP's do not: im2col windows (``as_strided``),
row-major copies of views (``compact``), and buffers made with ``numpy.zeros``/``numpy.empty`` and
filled by assignment (an LSTM's per-step outputs, a convolution's input gradient)."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn

from steps import step_function


def cnn():
    return nn.Sequential(
        nn.Conv(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv(4, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3),
    )


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        output, _ = self.lstm(x)
        return self.head(ndl.ops.split(output, 0)[-1])


MODELS = {
    "cnn": (cnn, lambda batch: (batch, 1, 8, 8), 0),
    "lstm": (LSTMClassifier, lambda batch: (4, batch, 6), 1),
}


def train(kind, compiled, steps=7):
    make, shape, batch_axis = MODELS[kind]
    np.random.seed(0)
    model = make()
    opt = ndl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    step = step_function(model, opt)
    step = ndl.compile(step) if compiled else step
    rng = np.random.default_rng(1)
    losses = []
    for index in range(steps):
        batch = 3 if index == 3 else 5  # one smaller batch: a second plan
        x = ndl.Tensor(rng.standard_normal(shape(batch)).astype(np.float32))
        y = ndl.Tensor(rng.integers(0, 3, batch), dtype="int64")
        losses.append(step(x, y).numpy().copy())
    return losses, [p.numpy().copy() for p in model.parameters()], step


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_compiled_step_of_the_model_is_bitwise_the_eager_one(kind):
    eager_losses, eager_params, _ = train(kind, compiled=False)
    losses, params, compiled = train(kind, compiled=True)
    assert compiled.captures == 2 and compiled.replays == 5
    assert [a.tobytes() for a in eager_losses] == [a.tobytes() for a in losses]
    for expected, got in zip(eager_params, params):
        assert expected.tobytes() == got.tobytes()


def course_softmax_loss(logits, y):
    """The loss as the course's homework writes it: logsumexp minus the one-hot picked logit."""
    batch, classes = logits.shape
    y_one_hot = ndl.init.one_hot(classes, y, device=logits.device, dtype=logits.dtype)
    return (ndl.ops.logsumexp(logits, axes=(1,)) - (logits * y_one_hot).sum(axes=(1,))).sum() / batch


@pytest.mark.parametrize("label_dtype", ["int64", "uint8", "float32"])
def test_a_course_written_loss_with_one_hot_labels_reads_each_replays_labels(label_dtype):
    """``init.one_hot`` converts the labels (uint8 from the course's MNIST loader, whole-number
    floats) to int64: the conversion is part of the replay, not the capture's labels frozen."""

    def run(compiled):
        np.random.seed(0)
        model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        step = step_function(model, opt, course_softmax_loss)
        step = ndl.compile(step) if compiled else step
        rng = np.random.default_rng(1)
        losses = []
        for _ in range(5):
            x = ndl.Tensor(rng.standard_normal((6, 10)).astype(np.float32))
            y = ndl.Tensor(rng.integers(0, 4, 6).astype(label_dtype), dtype=label_dtype)
            losses.append(step(x, y).numpy().copy())
        return losses

    assert [a.tobytes() for a in run(False)] == [a.tobytes() for a in run(True)]
