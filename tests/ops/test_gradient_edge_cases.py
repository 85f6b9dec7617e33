"""Gradients at the edges: LogSumExp of huge float32 inputs, powers at zero."""
import numpy as np
import pytest

import needle as ndl
from needle import ops

BOTH_PATHS = pytest.mark.parametrize("create_graph", [True, False], ids=["course", "fast"])


# ---- LogSumExp: softmax weights from max-shifted inputs -------------------------------------
@BOTH_PATHS
@pytest.mark.parametrize("magnitude", [1e9, 1e10, -1e10])
def test_logsumexp_gradient_of_huge_float32_inputs_is_the_exact_softmax(magnitude, create_graph, device):
    z = ndl.Tensor(np.array([[magnitude, magnitude], [magnitude, magnitude * 0.5]], dtype=np.float32), device=device)
    ops.logsumexp(z, axes=(1,)).sum().backward(create_graph=create_graph)
    grad = z.grad.numpy()
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad.sum(axis=1), [1.0, 1.0], rtol=1e-6)  # the weights sum to 1
    expected_second_row = [1.0, 0.0] if magnitude > 0 else [0.0, 1.0]
    np.testing.assert_array_equal(grad, [[0.5, 0.5], expected_second_row])


@BOTH_PATHS
@pytest.mark.parametrize("axes", [None, (0,), (1,), (0, 1)])
def test_logsumexp_gradient_over_any_axes_of_huge_inputs(axes, create_graph, device):
    base = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    z = ndl.Tensor((base + 1e9).astype(np.float32), device=device)
    out = ops.logsumexp(z, axes=axes)
    weights = ndl.Tensor(np.arange(1.0, 1.0 + np.prod(out.shape or (1,))).reshape(out.shape), device=device)
    (out * weights).sum().backward(create_graph=create_graph)
    # float32 holds 1e9 to a step of 64: the inputs are all 1e9 exactly
    shifted = (base + 1e9).astype(np.float32).astype(np.float64)
    reduce_axes = tuple(range(2)) if axes is None else axes
    softmax = np.exp(shifted - shifted.max(axis=reduce_axes, keepdims=True))
    softmax /= softmax.sum(axis=reduce_axes, keepdims=True)
    kept = np.reshape(weights.numpy(), np.max(shifted, axis=reduce_axes, keepdims=True).shape)
    np.testing.assert_allclose(z.grad.numpy(), kept * softmax, rtol=1e-6)


def test_logsumexp_second_order_stays_exact_for_huge_inputs(device):
    # d/dz_j of sum_i w_i softmax_i = softmax_j (w_j - sum_i w_i softmax_i)
    z = ndl.Tensor(np.array([1e9, 1e9], dtype=np.float32), device=device)
    ops.logsumexp(z).backward()
    first = z.grad
    (first * ndl.Tensor([1.0, 3.0], device=device)).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.5 * (1 - 2), 0.5 * (3 - 2)], rtol=1e-6)


# ---- powers at zero --------------------------------------------------------------------------
@BOTH_PATHS
def test_pow_gradient_in_the_exponent_at_a_zero_base_is_zero(create_graph, device):
    a = ndl.Tensor([0.0, 0.0, 2.0], device=device, dtype="float64")
    b = ndl.Tensor([2.0, 0.0, 3.0], device=device, dtype="float64")
    (a**b).sum().backward(create_graph=create_graph)
    # PyTorch's values: d/db a**b = a**b log a, taken as 0 at a == 0 for b >= 0
    np.testing.assert_allclose(b.grad.numpy(), [0.0, 0.0, 8.0 * np.log(2.0)], rtol=1e-12)
    # d/da a**b = b a**(b - 1), taken as 0 where b == 0
    np.testing.assert_allclose(a.grad.numpy(), [0.0, 0.0, 12.0], rtol=1e-12)


@BOTH_PATHS
def test_pow_gradient_broadcasts_with_a_zero_base(create_graph, device):
    a = ndl.Tensor([[0.0], [1.5]], device=device, dtype="float64")
    b = ndl.Tensor([2.0, 1.0], device=device, dtype="float64")
    (a**b).sum().backward(create_graph=create_graph)
    np.testing.assert_allclose(b.grad.numpy(), [1.5**2 * np.log(1.5), 1.5 * np.log(1.5)], rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), [[0.0 + 1.0], [2 * 1.5 + 1.0]], rtol=1e-12)


def test_pow_second_order_away_from_zero_is_unchanged(device):
    a = ndl.Tensor([2.0], device=device, dtype="float64")
    b = ndl.Tensor([3.0], device=device, dtype="float64")
    (a**b).backward()
    first = b.grad  # a**b log a
    first.backward()
    np.testing.assert_allclose(b.grad.numpy(), [8.0 * np.log(2.0) ** 2], rtol=1e-12)


@BOTH_PATHS
def test_power_scalar_zero_has_a_zero_gradient_at_zero(create_graph, device):
    x = ndl.Tensor([0.0, 2.0], device=device)
    (x**0).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
