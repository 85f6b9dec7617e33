"""The C walk of the fast backward pass (needle/_backward_walk.c) against the Python loops it replaces.

For every graph, both must visit the nodes in the same order, raise the same error on a graph
computed from changed data, and give every leaf the same gradient bit for bit (the sums of
gradients happen in the same order). CI sets ``NEEDLE_REQUIRE_C_EXTENSIONS=1``: there the
extension must have been built, so these checks cannot pass by skipping.
"""
import gc
import os
import weakref

import numpy as np
import pytest

import needle as ndl
from needle import backward, backward_walk, nn, ops

built = pytest.mark.skipif(not backward_walk.ENABLED, reason=f"the walk is {backward_walk.describe()}")


def test_ci_builds_the_extension():
    if os.environ.get("NEEDLE_REQUIRE_C_EXTENSIONS") != "1":
        pytest.skip("only where NEEDLE_REQUIRE_C_EXTENSIONS=1 (CI)")
    assert backward_walk._backward_walk is not None, backward_walk.describe()
    turned_off = os.environ.get("NEEDLE_BACKWARD_WALK") == "0"  # CI's run of the Python loops
    assert backward_walk.ENABLED is not turned_off, backward_walk.describe()


@pytest.fixture
def python_walk(monkeypatch):
    """A function that runs its argument with the Python loops instead of the C walk."""

    def run(function):
        with monkeypatch.context() as patch:
            patch.setattr(backward_walk, "checked_order", None)
            patch.setattr(backward_walk, "gradient_pass", None)
            patch.setattr(backward_walk, "count_spent", None)
            return function()

    return run


class Broken(ndl.TensorOp):
    """An op whose gradient raises."""

    def compute(self, a):
        return a

    def gradient(self, out_grad, node):
        raise ValueError("broken gradient")

    def gradient_data(self, out_grad, node):
        raise ValueError("broken gradient")


def random_graph(seed):
    """A random graph over a few leaves (float32 and float64, some constants): shared
    subexpressions, broadcasts, products and reductions, as ``(loss, leaves)``."""
    rng = np.random.default_rng(seed)
    leaves = []
    for index in range(4):
        dtype = "float64" if index == 3 and seed % 2 else "float32"
        leaves.append(ndl.Tensor(rng.standard_normal((3, 3)), dtype=dtype, requires_grad=index != 2))
    values = list(leaves)
    for _ in range(12):
        a, b = (values[i] for i in rng.integers(0, len(values), 2))
        kind = rng.integers(0, 7)
        if kind == 0:
            value = a + b
        elif kind == 1:
            value = a * b
        elif kind == 2:
            value = a @ b
        elif kind == 3:
            value = ops.relu(a) - b
        elif kind == 4:
            value = ops.broadcast_to(ops.summation(a, axes=(0,)).reshape((1, 3)), (3, 3)) * b
        elif kind == 5:
            value = ops.exp(a * 0.1) / (b * b + 1.0)
        else:
            value = a.transpose() + 2.0 * b
        values.append(value)
    loss = values[-1]
    for value in values[4:-1:3]:
        loss = loss + value * 0.5
    return ops.summation(loss), leaves


def leaf_gradients(build, seed):
    loss, leaves = build(seed)
    loss.backward(create_graph=False)
    return [None if leaf.grad is None else leaf.grad.numpy() for leaf in leaves]


@built
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("prune_constants", [True, False])
def test_the_order_is_the_python_order(seed, prune_constants):
    loss, _ = random_graph(seed)
    order, stale, plain = backward_walk.checked_order(loss, prune_constants)
    assert order == backward._checked_nodes_in_python(loss, prune_constants)
    assert stale is None and plain is True


@built
@pytest.mark.parametrize("seed", range(40))
def test_every_gradient_is_the_python_loops_bit_for_bit(seed, python_walk):
    in_c = leaf_gradients(random_graph, seed)
    in_python = python_walk(lambda: leaf_gradients(random_graph, seed))
    assert [g is None for g in in_c] == [g is None for g in in_python]
    for c, p in zip(in_c, in_python):
        if c is not None:
            assert c.dtype == p.dtype and c.tobytes() == p.tobytes()
    assert any(g is not None for g in in_c)


@built
def test_a_mlp_step_is_the_python_loops_bit_for_bit(python_walk):
    def step():
        ndl.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        x = ndl.Tensor(np.linspace(-1, 1, 24).reshape(4, 6), requires_grad=False)
        y = ndl.Tensor([0, 2, 1, 2], dtype="uint8", requires_grad=False)
        nn.SoftmaxLoss()(model(x), y).backward(create_graph=False)
        return [p.grad.numpy().tobytes() for p in model.parameters()]

    assert step() == python_walk(step)


@built
def test_a_stale_graph_raises_the_same_error(python_walk):
    def stale_backward():
        w = ndl.Tensor([1.0, 2.0])
        loss = ops.summation(w * w)
        w.data = ndl.Tensor([5.0, 5.0])
        with pytest.raises(RuntimeError) as error:
            loss.backward(create_graph=False)
        assert w.grad is None  # nothing was written
        return str(error.value)

    message = stale_backward()
    assert "had its data changed after the graph was built" in message
    assert message == python_walk(stale_backward)


@built
def test_a_gradient_of_another_dtype_is_cast_as_in_python(python_walk):
    def mixed():
        a = ndl.Tensor([1.0, 2.0], dtype="float32")
        b = ndl.Tensor([3.0, 4.0], dtype="float64")
        ops.summation(a * b).backward(create_graph=False)
        return a.grad.numpy(), b.grad.numpy()

    (a_c, b_c), (a_p, b_p) = mixed(), python_walk(mixed)
    assert a_c.dtype == np.float32 and b_c.dtype == np.float64
    assert a_c.tobytes() == a_p.tobytes() and b_c.tobytes() == b_p.tobytes()


@built
def test_a_graph_with_a_tuple_takes_the_python_loop():
    x = ndl.Tensor(np.arange(6.0).reshape(2, 3))
    first, second = ops.split(x, axis=0)
    loss = ops.summation(first * 2.0 + second)
    _, _, plain = backward_walk.checked_order(loss, True)
    assert plain is False
    loss.backward(create_graph=False)
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])


@built
def test_a_course_gradient_is_walked_through_its_inputs_property(python_walk):
    def second_derivative():
        x = ndl.Tensor([3.0])
        (x * x * x).backward()  # x.grad is a GradientTensor, its inputs a property
        gradient = x.grad
        gradient.backward(create_graph=False)
        return x.grad.numpy()

    assert second_derivative().tolist() == [18.0] == python_walk(second_derivative).tolist()


@built
def test_an_error_in_an_ops_gradient_reaches_the_caller():
    x = ndl.Tensor([1.0])
    with pytest.raises(ValueError, match="broken gradient"):
        ops.summation(Broken()(x)).backward(create_graph=False)


@built
def test_the_walk_keeps_no_node_alive():
    refs = []

    def run():
        loss, leaves = random_graph(3)
        for node in backward_walk.checked_order(loss, False)[0]:
            refs.append(weakref.ref(node))
        loss.backward(create_graph=False)

    for _ in range(3):
        run()
    gc.collect()
    assert refs and all(ref() is None for ref in refs)


# ---- the course backward()'s pass (course_pass) --------------------------------------------------
def every_course_gradient(build, seed):
    """Every node's ``.grad`` after the course's ``backward()``, as bytes (None where it has none),
    with the type of each gradient."""
    loss, _ = build(seed)
    order = backward._checked_nodes_in_python(loss, False)
    loss.backward()
    grads = [node.grad for node in order]
    return [(type(g).__name__, None if g is None else (g.numpy().dtype, g.numpy().tobytes())) for g in grads]


@built
@pytest.mark.parametrize("seed", range(40))
def test_every_course_gradient_is_the_python_loops_bit_for_bit(seed, python_walk):
    in_c = every_course_gradient(random_graph, seed)
    assert in_c == python_walk(lambda: every_course_gradient(random_graph, seed))
    assert sum(g is not None for _, g in in_c) > 4


def test_the_random_graphs_give_constants_deferred_and_plain_gradients():
    kinds = {kind for seed in range(40) for kind, _ in every_course_gradient(random_graph, seed)}
    assert {"DeferredGradient", "GradientTensor", "Tensor"} <= kinds


@built
def test_a_course_mlp_step_is_the_python_loops_bit_for_bit(python_walk):
    def step():
        ndl.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        opt = ndl.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        x = ndl.Tensor(np.linspace(-1, 1, 24).reshape(4, 6), requires_grad=False)
        y = ndl.Tensor([0, 2, 1, 2], dtype="uint8", requires_grad=False)
        hidden = model.modules[1](model.modules[0](x))
        loss = nn.SoftmaxLoss()(model.modules[2](hidden), y)
        loss.backward()
        opt.step()  # the batch's gradient is read after the update: backward-time weights
        kinds = (type(x.grad).__name__, type(hidden.grad).__name__, type(model.modules[0].weight.grad).__name__)
        grads = [x.grad, hidden.grad, loss.grad] + [p.grad for p in model.parameters()]
        return kinds, y.grad, [g.numpy().tobytes() for g in grads], [p.numpy().tobytes() for p in model.parameters()]

    in_c = step()
    assert in_c[0] == ("DeferredGradient", "Tensor", "GradientTensor") and in_c[1] is None
    assert in_c == python_walk(step)


@built
def test_a_failing_course_pass_raises_and_writes_no_grad():
    x = ndl.Tensor([1.0])
    middle = x * 2.0
    loss = ops.summation(Broken()(middle) + middle)
    with pytest.raises(ValueError, match="broken gradient"):
        loss.backward()
    assert x.grad is None and middle.grad is None and loss.grad is None


@built
@pytest.mark.parametrize("seed", range(10))
def test_the_leaves_of_the_course_pass_are_the_python_loops(seed):
    loss, _ = random_graph(seed)
    order = backward_walk.checked_order(loss, False)[0]
    leaves = backward_walk.leaves_requiring_grad(order)
    assert leaves == backward._leaves_requiring_grad(order)[0] and leaves


@pytest.mark.parametrize("walk", ["c", "python"])
def test_a_gradient_that_cannot_be_made_writes_no_grad(walk, monkeypatch, python_walk):
    made = []

    def failing_on_the_second(grad):
        if made:
            raise MemoryError("no room for the second gradient")
        made.append(grad)
        return original(grad)

    original = backward._detached
    monkeypatch.setattr(backward, "_detached", failing_on_the_second)
    x = ndl.Tensor([1.0, 2.0])
    constant = ndl.Tensor([3.0, 4.0], requires_grad=False)
    middle = x * 2.0
    loss = ops.summation(middle * middle + constant)
    run = (lambda f: f()) if walk == "c" else python_walk
    with pytest.raises(MemoryError, match="second gradient"):
        run(loss.backward)
    assert made, "the first inner gradient was made"
    assert x.grad is None and middle.grad is None and constant.grad is None and loss.grad is None


@built
def test_a_constant_takes_its_ops_constant_input_gradients_once_per_node(monkeypatch):
    calls = []
    original = ops.EWiseMul.constant_input_gradients

    def counted(self, out_grad, node):
        calls.append(node)
        return original(self, out_grad, node)

    monkeypatch.setattr(ops.EWiseMul, "constant_input_gradients", counted)
    w = ndl.Tensor([1.0, 2.0])
    constant = ndl.Tensor([3.0, 4.0], requires_grad=False)
    product = w * constant
    ops.summation(product).backward()
    assert calls == [product]
    np.testing.assert_array_equal(constant.grad.numpy(), [1.0, 2.0])


@built
def test_the_course_pass_keeps_no_node_alive():
    refs = []

    def run():
        loss, _ = random_graph(5)
        for node in backward_walk.checked_order(loss, False)[0]:
            refs.append(weakref.ref(node))
        loss.backward()
        del loss

    for _ in range(3):
        run()
    gc.collect()
    assert refs and all(ref() is None for ref in refs)


# ---- the counters of a backward() (count_spent) ----------------------------------------------------
@built
def test_the_spent_and_frozen_counts_are_the_python_loops(python_walk):
    def counts():
        ndl.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        opt = ndl.optim.SGD(model.modules[2].parameters(), lr=0.1)  # the first layer is frozen
        x = ndl.Tensor(np.linspace(-1, 1, 24).reshape(4, 6), requires_grad=False)
        y = ndl.Tensor([0, 2, 1, 2], dtype="uint8", requires_grad=False)
        loss = nn.SoftmaxLoss()(model(x), y)
        before = ndl.autograd.snapshot()
        loss.backward()
        loss.backward(create_graph=False)  # the same nodes again: already spent
        after = ndl.autograd.snapshot()
        spent = [node._spent for node in backward._checked_nodes_in_python(loss, False) if node.op is not None]
        del opt
        return after.frozen_gradients - before.frozen_gradients, after.backward_calls - before.backward_calls, spent

    in_c = counts()
    assert in_c == python_walk(counts)
    assert in_c[0] == 4 and in_c[1] == 2 and all(flag is True for flag in in_c[2])
