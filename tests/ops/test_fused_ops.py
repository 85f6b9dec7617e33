"""Fused ops give the values and gradients of the unfused chains they replace."""
import numpy as np
import pytest

import needle as ndl
from needle import ops

rng = np.random.default_rng(3)


def run(chain, arrays, device, dtype, create_graph):
    tensors = [ndl.Tensor(a, device=device, dtype=dtype) for a in arrays]
    out = chain(*tensors)
    out.sum().backward(create_graph=create_graph)
    return out.numpy(), [t.grad.numpy() for t in tensors]


def assert_same(fused, unfused, rtol):
    np.testing.assert_allclose(fused[0], unfused[0], rtol=rtol, atol=rtol)
    for got, want in zip(fused[1], unfused[1]):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


LINEAR_SHAPES = [
    pytest.param((5, 3), (1, 4), id="2d-bias(1,out)"),
    pytest.param((5, 3), (4,), id="2d-bias(out,)"),
    pytest.param((2, 5, 3), (1, 4), id="3d-input"),
]


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-5)])
@pytest.mark.parametrize("create_graph", [True, False])
@pytest.mark.parametrize("x_shape, bias_shape", LINEAR_SHAPES)
def test_linear_equals_matmul_plus_broadcast_bias(x_shape, bias_shape, create_graph, dtype, rtol, device):
    arrays = [rng.normal(size=x_shape), rng.normal(size=(3, 4)), rng.normal(size=bias_shape)]
    out_shape = x_shape[:-1] + (4,)

    def unfused(x, w, b):
        return x @ w + ops.broadcast_to(ops.reshape(b, (1,) * (len(out_shape) - 1) + (4,)), out_shape)

    assert_same(run(ops.linear, arrays, device, dtype, create_graph), run(unfused, arrays, device, dtype, create_graph), rtol)


@pytest.mark.parametrize("create_graph", [True, False])
def test_linear_without_bias_equals_matmul(create_graph, device):
    arrays = [rng.normal(size=(5, 3)), rng.normal(size=(3, 4))]
    assert_same(run(ops.linear, arrays, device, "float64", create_graph), run(ops.matmul, arrays, device, "float64", create_graph), 1e-12)


def unfused_softmax_cross_entropy(logits, labels):
    batch, classes = logits.shape
    one_hot = ndl.init.one_hot(classes, labels, device=logits.device, dtype=logits.dtype)
    return (ops.logsumexp(logits, axes=(1,)) - (logits * one_hot).sum(axes=(1,))).sum() / batch


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-5)])
@pytest.mark.parametrize("create_graph", [True, False])
def test_softmax_cross_entropy_equals_the_unfused_chain(create_graph, dtype, rtol, device):
    logits = rng.normal(size=(6, 5)) * 3
    labels = np.array([0, 4, 2, 2, 1, 3])
    results = []
    for loss_fn in (ops.softmax_cross_entropy, unfused_softmax_cross_entropy):
        z = ndl.Tensor(logits, device=device, dtype=dtype)
        y = ndl.Tensor(labels, device=device, dtype="int64", requires_grad=False)
        loss = loss_fn(z, y)
        assert loss.shape == () and loss.dtype == np.dtype(dtype)
        loss.backward(create_graph=create_graph)
        results.append((loss.numpy(), [z.grad.numpy()]))
    assert_same(*results, rtol)


def test_softmax_cross_entropy_is_stable_for_huge_logits(device):
    z = ndl.Tensor([[1e5, -1e5, 0.0], [-1e5, -1e5, 1e5]], device=device)
    y = ndl.Tensor([0, 1], device=device, dtype="int64", requires_grad=False)
    loss = ops.softmax_cross_entropy(z, y)
    np.testing.assert_allclose(loss.numpy(), (0.0 + 2e5) / 2, rtol=1e-6)
    loss.backward(create_graph=False)
    expected = np.array([[0.0, 0.0, 0.0], [0.0, -1.0, 1.0]]) / 2
    np.testing.assert_allclose(z.grad.numpy(), expected, atol=1e-6)


def test_softmax_cross_entropy_rejects_mismatched_labels(device):
    z = ndl.Tensor(np.zeros((3, 4)), device=device)
    y = ndl.Tensor([0, 1], device=device, dtype="int64", requires_grad=False)
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropy.*\(3, 4\).*\(2,\)"):
        ops.softmax_cross_entropy(z, y)


def second_order(loss_fn, logits, labels, weights, device):
    """Gradients, with respect to the logits and to ``out_grad``, of ``sum(weights * dloss/dlogits)``."""
    z = ndl.Tensor(logits, device=device, dtype="float64")
    y = ndl.Tensor(labels, device=device, dtype="int64", requires_grad=False)
    k = ndl.Tensor(np.array(1.7), device=device, dtype="float64")
    loss_fn(z, y).backward(k)
    first = z.grad
    z.grad = None
    (first * ndl.Tensor(weights, device=device, dtype="float64")).sum().backward()
    return first.numpy(), z.grad.numpy(), k.grad.numpy()


def test_softmax_cross_entropy_gradient_of_gradient_equals_the_unfused_chain(device):
    logits = rng.normal(size=(4, 3)) * 2
    labels = np.array([2, 0, 1, 2])
    weights = rng.normal(size=(4, 3))
    fused = second_order(ops.softmax_cross_entropy, logits, labels, weights, device)
    unfused = second_order(unfused_softmax_cross_entropy, logits, labels, weights, device)
    for got, want in zip(fused, unfused):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert np.any(fused[1]) and np.any(fused[2]), "the second-order gradients must not vanish"


@pytest.mark.parametrize("x_needs_grad", [True, False])
def test_linear_gradient_reaches_every_input_and_the_fast_path_only_those_that_need_it(x_needs_grad, device):
    x_data, w_data = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    x = ndl.Tensor(x_data, device=device, requires_grad=x_needs_grad)
    w = ndl.Tensor(w_data, device=device)
    out = ops.linear(x, w, ndl.Tensor(rng.normal(size=(1, 2)), device=device))
    ones = np.ones((3, 2))
    grads = out.op.gradient(ndl.Tensor(ones, device=device, requires_grad=False), out)
    # the course's backward() gives a batch that needs no gradient its .grad too
    np.testing.assert_allclose(grads[0].numpy(), ones @ w_data.T, rtol=1e-5)
    assert grads[1].shape == (4, 2) and grads[2].shape == (1, 2)
    fast = out.op.gradient_data(ndl.NDArray(ones, device=device, dtype="float32"), out)
    assert (fast[0] is not None) == x_needs_grad
    assert fast[1].shape == (4, 2) and fast[2].shape == (1, 2)


def test_softmax_cross_entropy_backward_can_run_again(device, lazy_mode):
    """The forward's saved exponentials are used once; later backward calls recompute them."""
    logits = rng.normal(size=(4, 3))
    z = ndl.Tensor(logits, device=device)
    y = ndl.Tensor([0, 2, 1, 1], device=device, dtype="int64", requires_grad=False)
    loss = ops.softmax_cross_entropy(z, y)
    gradients = []
    for create_graph in (True, True, False, False, True):
        loss.backward(create_graph=create_graph)
        gradients.append(z.grad.numpy().copy())
    for gradient in gradients[1:]:
        np.testing.assert_allclose(gradient, gradients[0], rtol=1e-6)
    assert np.any(gradients[0])
