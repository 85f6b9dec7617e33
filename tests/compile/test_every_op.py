"""Every op of ``needle.ops`` in a compiled step, replayed bitwise as eager.

Each step updates one bare ``Parameter`` (held by the optimizer alone, as in a lesson's linear
regression) through the op, with a new input each call, under the course ``backward()`` and
``backward(create_graph=False)``: an operation the capture does not see (a copy numpy makes
outside the trace, an array the op builds and fills) would replay the capture's values.
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops

SHAPE = (4, 6)
OPS = {
    "add": lambda w, x: ops.add(w, x),
    "add_scalar": lambda w, x: ops.add_scalar(w * x, 1.5),
    "broadcast_to": lambda w, x: ops.broadcast_to(ops.reshape(ops.summation(w * x, axes=(0,)), (1, 6)), (3, 6)),
    "conv": lambda w, x: ops.conv(
        ops.reshape(w * x, (1, 4, 6, 1)), ops.reshape(ops.summation(w, axes=(0,)), (1, 1, 1, 6)), stride=1, padding=1
    ),
    "conv_strided": lambda w, x: ops.conv(
        ops.reshape(w * x, (1, 4, 6, 1)), ops.reshape(ops.summation(w, axes=(1,)), (2, 2, 1, 1)), stride=2, padding=1
    ),
    "dilate": lambda w, x: ops.dilate(w * x, (0, 1), 2),
    "undilate": lambda w, x: ops.undilate(w * x, (0, 1), 1),
    "divide": lambda w, x: ops.divide(w, x * x + 1),
    "divide_scalar": lambda w, x: ops.divide_scalar(w * x, 3.0),
    "exp": lambda w, x: ops.exp(w * x * 0.1),
    "flip": lambda w, x: ops.flip(w * x, (0, 1)),
    "log": lambda w, x: ops.log(w * w * x * x + 1),
    "logsoftmax": lambda w, x: ops.logsoftmax(w * x),
    "logsumexp": lambda w, x: ops.logsumexp(w * x, axes=(1,)),
    "logsumexp_all": lambda w, x: ops.logsumexp(w * x),
    "matmul": lambda w, x: ops.matmul(w * x, ops.transpose(w)),
    "mul_scalar": lambda w, x: ops.mul_scalar(w * x, 2.0),
    "negate": lambda w, x: ops.negate(w * x),
    "pad": lambda w, x: ops.pad(w * x, ((1, 2), (0, 1))),
    "power": lambda w, x: ops.power(w * w * 0.1 + 1, x * 0 + 2),
    "power_scalar": lambda w, x: ops.power_scalar(w * x * 0.3, 3),
    "relu": lambda w, x: ops.relu(w * x),
    "reshape": lambda w, x: ops.reshape(w * x, (6, 4)),
    "sigmoid": lambda w, x: ops.sigmoid(w * x),
    "split_stack": lambda w, x: ops.stack(list(ops.split(w * x, 1))[::-1], 0),
    "summation": lambda w, x: ops.summation(w * x, axes=(0,)),
    "tanh": lambda w, x: ops.tanh(w * x),
    "transpose": lambda w, x: ops.transpose(w * x),
}


def train(op, compiled, create_graph):
    np.random.seed(0)
    w = ndl.nn.Parameter(ndl.Tensor(np.random.randn(*SHAPE).astype(np.float32)))
    opt = ndl.optim.SGD([w], lr=0.01)

    def step(x):
        opt.reset_grad()
        out = op(w, x)
        loss = (out * out).sum()
        if create_graph is None:
            loss.backward()
        else:
            loss.backward(create_graph=create_graph)
        opt.step()
        return loss

    step = ndl.compile(step) if compiled else step
    rng = np.random.default_rng(1)
    losses = [step(ndl.Tensor(rng.standard_normal(SHAPE).astype(np.float32))).numpy().copy() for _ in range(4)]
    return losses + [w.numpy().copy()], step


@pytest.mark.parametrize("create_graph", [None, False], ids=["course-backward", "create_graph-False"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_the_op_replays_bitwise(name, create_graph):
    expected, _ = train(OPS[name], False, create_graph)
    got, compiled = train(OPS[name], True, create_graph)
    assert compiled.replays == 3
    assert [a.tobytes() for a in expected] == [a.tobytes() for a in got]


def test_a_tensor_the_step_reaches_and_the_user_replaces_is_read_anew():
    """A tensor the step reads from its closure is state: data of its shape given to it between
    calls is copied into the array the plan reads (no new capture); another shape captures again."""
    scale = ndl.Tensor(np.full(SHAPE, 2.0, np.float32))
    w = ndl.nn.Parameter(ndl.Tensor(np.ones(SHAPE, np.float32)))
    opt = ndl.optim.SGD([w], lr=0.0)

    @ndl.compile
    def step(x):
        opt.reset_grad()
        loss = (w * scale * x).sum()
        loss.backward()
        opt.step()
        return loss

    x = ndl.Tensor(np.ones(SHAPE, np.float32))
    assert float(step(x).numpy()) == 48.0 and float(step(x).numpy()) == 48.0
    scale.data = ndl.Tensor(np.full(SHAPE, 3.0, np.float32))
    assert float(step(x).numpy()) == 72.0
    assert step.captures == 1
    scale.data = ndl.Tensor(np.full(SHAPE[::-1], 1.0, np.float32).T)  # another layout, equal shape: copied too
    assert float(step(x).numpy()) == 24.0 and step.captures == 1
    scale.data = ndl.Tensor(np.full((1,) + SHAPE, 4.0, np.float32))  # a broadcastable other shape
    assert float(step(x).numpy()) == 96.0 and step.captures == 2
