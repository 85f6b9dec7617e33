"""clip_grad_norm: total norm, scaling, and shared gradient arrays scaled once."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, optim


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_clip_scales_to_max_norm_and_returns_the_total(device):
    a = nn.Parameter(ndl.Tensor([0.0, 0.0], device=device))
    b = nn.Parameter(ndl.Tensor([[0.0]], device=device))
    c = nn.Parameter(ndl.Tensor([0.0], device=device))  # no gradient: ignored
    a.grad = ndl.Tensor([3.0, 0.0], device=device)
    b.grad = ndl.Tensor([[4.0]], device=device)
    total = optim.clip_grad_norm([a, b, c], max_norm=2.5)
    assert isinstance(total, float) and total == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [1.5, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [[2.0]], rtol=1e-5)
    assert a.grad.dtype == np.float32 and c.grad is None


def test_clip_leaves_small_gradients_alone():
    a = nn.Parameter(ndl.Tensor([0.0, 0.0]))
    a.grad = ndl.Tensor([0.3, 0.4])
    grad = a.grad
    assert optim.clip_grad_norm([a], 1.0) == pytest.approx(0.5)
    assert a.grad is grad
    np.testing.assert_allclose(a.grad.numpy(), [0.3, 0.4])


def test_clip_scales_gradients_that_share_an_array_once():
    a = nn.Parameter(ndl.Tensor([1.0, 1.0]))
    b = nn.Parameter(ndl.Tensor([1.0, 1.0]))
    (a + b).sum().backward(create_graph=False)  # a.grad and b.grad may be one array
    total = optim.clip_grad_norm([a, b], 1.0)
    assert total == pytest.approx(2.0)
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.5], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.5, 0.5], rtol=1e-5)


def test_clip_rejects_a_non_positive_max_norm():
    with pytest.raises(ValueError, match="max_norm=0.0"):
        optim.clip_grad_norm([], 0)
