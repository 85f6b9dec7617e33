"""backward()'s contract: the ones seed, who gets a .grad on each path, gradient dtypes, labels."""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import nn, ops

BOTH_PATHS = pytest.mark.parametrize("create_graph", [True, False], ids=["course", "fast"])


# ---- the seed: all ones for any shape ---------------------------------------------------------
@BOTH_PATHS
def test_non_scalar_backward_equals_backward_with_explicit_ones(create_graph, device):
    rng = np.random.default_rng(0)
    x_data, w_data = rng.normal(size=(4, 3)), rng.normal(size=(3, 5))
    grads = []
    for out_grad in (None, "ones"):
        x = ndl.Tensor(x_data, device=device, dtype="float64")
        w = ndl.Tensor(w_data, device=device, dtype="float64")
        y = ops.tanh(x @ w)
        seed = None if out_grad is None else ndl.Tensor(np.ones((4, 5)), device=device, dtype="float64")
        y.backward(seed, create_graph=create_graph)
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for implicit, explicit in zip(*grads):
        np.testing.assert_array_equal(implicit, explicit)
    # and both equal the gradient of the sum
    x = ndl.Tensor(x_data, device=device, dtype="float64")
    w = ndl.Tensor(w_data, device=device, dtype="float64")
    ops.tanh(x @ w).sum().backward(create_graph=create_graph)
    np.testing.assert_allclose(grads[0][0], x.grad.numpy(), rtol=1e-12)


@BOTH_PATHS
def test_backward_on_a_tensor_that_needs_no_gradient_still_raises(create_graph, device):
    x = ndl.Tensor([[1.0, 2.0]], device=device).detach()
    y = x * x
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward(create_graph=create_graph)
    assert x.grad is None


@pytest.mark.needle_backend("nd")
@BOTH_PATHS
def test_backward_on_an_integer_tensor_says_gradients_need_floats(create_graph, device):
    counts = ndl.Tensor([1, 2, 3], device=device, dtype="int64")
    with pytest.raises(RuntimeError, match="floating-point tensor.*int64.*NEEDLE_BACKEND=np"):
        (counts * counts).backward(create_graph=create_graph)
    assert counts.grad is None


def course_gradient_of_gradient_check():
    """The course's own check, as its hw1 tests write it; returns every value it asserts on."""
    x2 = ndl.Tensor([6])
    x3 = ndl.Tensor([0])
    y = x2 * x2 + x2 * x3
    y.backward()
    grad_x2 = x2.grad
    grad_x3 = x3.grad
    grad_x2.backward()
    return y, grad_x2, grad_x3, x2.grad, x3.grad


@pytest.mark.parametrize(
    "backend, dtype", [pytest.param("np", "int64", marks=pytest.mark.needle_backend("np")),
                       pytest.param("nd", "float32", marks=pytest.mark.needle_backend("nd"))]
)
def test_the_course_gradient_of_gradient_check_runs_under_both_backends(backend, dtype):
    y, grad_x2, grad_x3, grad_x2_x2, grad_x2_x3 = course_gradient_of_gradient_check()
    # y = x2^2 + x2 x3 at (6, 0): dy/dx2 = 2 x2 + x3 = 12, dy/dx3 = x2 = 6; d(dy/dx2)/dx2 = 2, /dx3 = 1
    for value, expected in ((y, 36), (grad_x2, 12), (grad_x3, 6), (grad_x2_x2, 2), (grad_x2_x3, 1)):
        assert value.dtype == dtype, "a gradient has its node's dtype"
        assert value.numpy().tolist() == [expected]


@pytest.mark.needle_backend("np")
@BOTH_PATHS
def test_integer_gradients_under_the_numpy_backend(create_graph):
    counts = ndl.Tensor([1, 2, 3])
    weights = ndl.Tensor([[2, 0, 1]])
    assert counts.dtype == "int64"
    ((counts * weights).sum() + counts * 3).backward(create_graph=create_graph)
    assert counts.grad.dtype == "int64" and counts.grad.numpy().tolist() == [9, 3, 6]  # 3 w + 3: the sum reaches all 3 outputs
    assert weights.grad.dtype == "int64" and weights.grad.numpy().tolist() == [[3, 6, 9]]
    flags = ndl.Tensor([True, False])
    with pytest.raises(RuntimeError, match="floating-point tensor.*bool"):
        (flags * flags).backward(create_graph=create_graph)
    assert flags.grad is None


# ---- the course's backward() gives every node its .grad -------------------------------------
def test_course_backward_gives_constant_leaves_their_grad(device):
    rng = np.random.default_rng(1)
    batch_data, w_data = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    batch = ndl.Tensor(batch_data, device=device, requires_grad=False)  # a data batch
    w = ndl.Tensor(w_data, device=device)
    frozen = ndl.Tensor(rng.normal(size=(2,)), device=device).detach()  # a detached weight
    hidden = batch @ w
    loss = (hidden * frozen).sum()  # frozen broadcasts; frozen.broadcast_to(...) would be a new constant
    loss.backward()
    seed = np.ones((4, 2)) * frozen.numpy()
    np.testing.assert_allclose(batch.grad.numpy(), seed @ w_data.T, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), batch_data.T @ seed, rtol=1e-5)
    np.testing.assert_allclose(frozen.grad.numpy(), (batch_data @ w_data).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(hidden.grad.numpy(), seed, rtol=1e-6)
    for constant in (batch, frozen):
        # a constant's gradient is a plain value: it keeps no graph alive through the batch
        assert constant.grad.op is None and constant.grad.requires_grad is False
        assert constant.grad.dtype == constant.dtype


def test_fast_backward_still_skips_constants(device):
    batch = ndl.Tensor(np.ones((4, 3)), device=device, requires_grad=False)
    w = ndl.Tensor(np.ones((3, 2)), device=device)
    (batch @ w).sum().backward(create_graph=False)
    assert batch.grad is None and w.grad is not None


def test_course_backward_through_nn_linear_gives_the_batch_its_grad(device):
    np.random.seed(0)
    layer = nn.Linear(3, 2, device=device)
    batch_data = np.random.default_rng(2).normal(size=(5, 3))
    batch = ndl.Tensor(batch_data, device=device, requires_grad=False)
    layer(batch).sum().backward()
    expected = np.ones((5, 2)) @ layer.weight.numpy().T
    np.testing.assert_allclose(batch.grad.numpy(), expected, rtol=1e-5)


@BOTH_PATHS
def test_integer_labels_get_no_gradient_on_both_paths(create_graph, device):
    logits = ndl.Tensor(np.random.default_rng(3).normal(size=(3, 4)), device=device)
    labels = ndl.Tensor(np.array([0, 1, 2]), device=device)  # requires_grad=True by default
    assert labels.requires_grad and labels.dtype == np.int64
    loss = nn.SoftmaxLoss()(logits, labels)
    loss.backward(create_graph=create_graph)
    assert labels.grad is None
    assert logits.grad is not None and logits.grad.shape == (3, 4)


@pytest.mark.needle_backend("nd")  # asserts the float32 default
@BOTH_PATHS
def test_an_integer_or_bool_input_of_an_arithmetic_op_gets_no_gradient(create_graph, device):
    x = ndl.Tensor([1.0, 2.0, 3.0], device=device)
    counts = ndl.Tensor([1, 0, 2], device=device, dtype="int64")
    (x * counts).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 2.0])
    assert x.grad.dtype == np.float32
    assert counts.grad is None


def test_course_backward_on_a_constant_batch_retains_no_graph(device, graph_baseline):
    """A data batch that outlives the step (a list of batches) holds only its gradient's array."""
    batch = ndl.Tensor(np.ones((4, 3)), device=device, requires_grad=False)
    before = graph_baseline()
    w = ndl.Tensor(np.ones((3, 2)), device=device)
    loss = ops.relu(batch @ w).sum()
    loss.backward()
    del w, loss
    after = graph_baseline()
    assert after.live_nodes == before.live_nodes, "the batch's .grad kept graph nodes alive"
    assert after.live_tensors == before.live_tensors + 1  # batch.grad, a constant
    assert batch.grad.op is None


# ---- the students' hw1 loops ------------------------------------------------------------------
def _mnist_like(seed=4, samples=60, features=6, classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(samples, features)).astype(np.float32)
    y = rng.integers(0, classes, size=samples)
    W1 = (rng.normal(size=(features, 8)) / np.sqrt(8)).astype(np.float32)
    W2 = (rng.normal(size=(8, classes)) / np.sqrt(classes)).astype(np.float32)
    return X, y, W1, W2


def _numpy_nn_epoch(X, y, W1, W2, lr, batch):
    W1, W2 = W1.astype(np.float64), W2.astype(np.float64)
    for start in range(0, X.shape[0], batch):
        Xb, yb = X[start : start + batch].astype(np.float64), y[start : start + batch]
        hidden = np.maximum(Xb @ W1, 0)
        logits = hidden @ W2
        softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
        softmax /= softmax.sum(axis=1, keepdims=True)
        softmax[np.arange(len(yb)), yb] -= 1
        G2 = softmax / len(yb)
        G1 = (G2 @ W2.T) * (hidden > 0)
        W1, W2 = W1 - lr * Xb.T @ G1, W2 - lr * hidden.T @ G2
    return W1, W2


def _softmax_loss(Z, y_one_hot):
    return (ops.logsumexp(Z, axes=(1,)).sum() - (y_one_hot * Z).sum()) / Z.shape[0]


def _needle_nn_epoch(X, y, W1, W2, lr, batch, update):
    """A student's completed hw1 ``nn_epoch``: plain ops, the course's backward(), detached weights."""
    classes = W2.shape[1]
    for start in range(0, X.shape[0], batch):
        Xb = ndl.Tensor(X[start : start + batch])
        yb = y[start : start + batch]
        one_hot = np.zeros((len(yb), classes), dtype=np.float32)
        one_hot[np.arange(len(yb)), yb] = 1
        loss = _softmax_loss(ops.relu(Xb @ W1) @ W2, ndl.Tensor(one_hot))
        loss.backward()
        W1, W2 = update(W1, lr), update(W2, lr)
    return W1, W2


def _update_then_detach(W, lr):
    return (W - lr * W.grad).detach()


def _subtract_in_place_then_detach(W, lr):
    W -= lr * W.grad
    return W.detach()


@pytest.mark.parametrize("update", [_update_then_detach, _subtract_in_place_then_detach])
def test_hw1_loop_with_detached_weights_trains_like_numpy(update):
    X, y, W1_data, W2_data = _mnist_like()
    W1, W2 = ndl.Tensor(W1_data), ndl.Tensor(W2_data)
    for _ in range(2):
        W1, W2 = _needle_nn_epoch(X, y, W1, W2, lr=0.5, batch=10, update=update)
    expected = (W1_data, W2_data)
    for _ in range(2):
        expected = _numpy_nn_epoch(X, y, *expected, lr=0.5, batch=10)
    np.testing.assert_allclose(W1.numpy(), expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(W2.numpy(), expected[1], rtol=1e-4, atol=1e-5)
    assert np.abs(W1.numpy() - W1_data).max() > 1e-2, "the weights must have moved"


# ---- gradients keep each tensor's dtype --------------------------------------------------------
@BOTH_PATHS
def test_a_leaf_gradient_has_the_leaf_dtype(create_graph, device):
    small = ndl.Tensor(np.array([1.0, 2.0], dtype=np.float32), device=device)
    wide = ndl.Tensor(np.array([3.0, 4.0]), device=device, dtype="float64")
    out = (small * wide).sum()
    assert out.dtype == np.float64  # the forward follows numpy's promotion
    out.backward(create_graph=create_graph)
    assert small.grad.dtype == np.float32 and wide.grad.dtype == np.float64
    np.testing.assert_array_equal(small.grad.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(wide.grad.numpy(), [1.0, 2.0])


def test_course_backward_gives_every_node_its_own_dtype_and_stays_differentiable(device):
    x = ndl.Tensor(np.array([1.0, 2.0], dtype=np.float32), device=device)
    cube = x * x * x
    mixed = (cube + ndl.Tensor(np.array([0.5, 0.5]), device=device, dtype="float64")).sum()
    mixed.backward()
    assert cube.grad.dtype == np.float32 and x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    first = x.grad
    x.grad = None
    first.sum().backward()  # the cast is part of the gradient's graph
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])
    assert x.grad.dtype == np.float32


# ---- labels that require grad on the fast path, as the Trainer runs it --------------------------
def test_trainer_fits_a_list_of_hand_made_tensor_batches():
    from trainers import Trainer

    rng = np.random.default_rng(5)
    batches = []
    for _ in range(4):
        X = rng.normal(size=(16, 2)).astype(np.float32)
        batches.append((ndl.Tensor(X), ndl.Tensor((X[:, 0] > 0).astype(np.int64))))  # default requires_grad
    assert all(y.requires_grad for _, y in batches)
    np.random.seed(0)
    model = nn.Linear(2, 2)
    trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.5), progress=False)
    history = trainer.fit(batches, epochs=5)
    losses = history.column("loss")
    assert len(losses) == 20 and losses[-1] < losses[0]
    assert trainer.evaluate(batches)["accuracy"] > 0.9
    assert all(y.grad is None for _, y in batches), "integer labels get no gradient"
    del trainer, history
    gc.collect()


def test_course_backward_gives_a_constant_multiplicand_its_grad(device):
    """A Dropout-style mask or a one-hot matrix times a weight: the constant's .grad is out_grad * weight."""
    mask = ndl.Tensor(np.array([[1.0, 0.0], [2.0, 1.0]]), device=device, dtype="float64", requires_grad=False)
    w = ndl.Tensor(np.array([[3.0, 4.0], [5.0, 6.0]]), device=device, dtype="float64")
    ((w * w) * mask).sum().backward()
    np.testing.assert_array_equal(mask.grad.numpy(), [[9.0, 16.0], [25.0, 36.0]])
    np.testing.assert_array_equal(w.grad.numpy(), [[6.0, 0.0], [20.0, 12.0]])
    assert mask.grad.op is None and not mask.grad.requires_grad
