"""PyTorch names users reach for: each behaves as PyTorch documents it, in needle's terms."""
import numpy as np
import pytest

import needle as ndl
from needle import nn


def test_manual_seed_reproduces_every_draw_needle_makes():
    def draws():
        layer = nn.Linear(3, 2)
        mask = nn.Dropout(0.5)(ndl.Tensor(np.ones((4, 4), dtype=np.float32))).numpy()
        order = next(iter(ndl.data.DataLoader(ndl.data.NDArrayDataset(np.arange(8.0).reshape(8, 1)), 8, shuffle=True)))
        return layer.weight.numpy(), mask, order[0].numpy()

    ndl.manual_seed(7)
    first = draws()
    ndl.manual_seed(7)
    second = draws()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    ndl.manual_seed(8)
    assert not np.array_equal(draws()[0], first[0])


@pytest.mark.parametrize("seed, error", [(1.5, TypeError), ("0", TypeError), (True, TypeError), (-1, ValueError), (2**32, ValueError)])
def test_manual_seed_refuses_what_numpy_cannot_take(seed, error):
    state = np.random.get_state()[1].copy()
    with pytest.raises(error, match="manual_seed"):
        ndl.manual_seed(seed)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_cross_entropy_loss_is_softmax_loss():
    logits = ndl.Tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]])
    labels = ndl.Tensor([0, 2], dtype="int64")
    z = logits.numpy().astype(np.float64)
    expected = np.mean(np.log(np.exp(z).sum(axis=1)) - z[[0, 1], [0, 2]])
    assert nn.CrossEntropyLoss is nn.SoftmaxLoss
    np.testing.assert_allclose(nn.CrossEntropyLoss()(logits, labels).item(), expected, rtol=1e-6)


def test_argmax_and_argmin_match_numpy_and_carry_no_gradient():
    values = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], dtype=np.float32)
    t = ndl.Tensor(values, requires_grad=True)
    for axis in (None, 0, 1, -1):
        np.testing.assert_array_equal(t.argmax(axis=axis).numpy(), values.argmax(axis=axis))
        np.testing.assert_array_equal(t.argmin(axis=axis).numpy(), values.argmin(axis=axis))
    kept = t.argmax(axis=1, keepdims=True)
    assert kept.shape == (2, 1) and kept.dtype == np.int64
    assert not kept.requires_grad and kept.op is None and kept.inputs == ()


@pytest.mark.parametrize("axis, error", [(2, IndexError), (-3, IndexError), (1.0, TypeError), ("0", TypeError)])
def test_argmax_refuses_a_bad_axis_naming_it(axis, error):
    with pytest.raises(error, match="argmax axis"):
        ndl.Tensor([[1.0, 2.0]]).argmax(axis=axis)


def test_argmax_of_an_empty_tensor_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        ndl.Tensor(np.zeros((0, 3), dtype=np.float32)).argmax()


def test_requires_grad_underscore_sets_in_place_and_returns_the_tensor():
    w = ndl.Tensor([1.0, 2.0], requires_grad=False)
    assert w.requires_grad_() is w and w.requires_grad
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    assert w.requires_grad_(False) is w and not w.requires_grad


def test_requires_grad_underscore_refuses_to_cut_a_computed_tensor():
    w = ndl.Tensor([1.0], requires_grad=True)
    y = w * 2
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad_(False)
    assert y.requires_grad
    with pytest.raises(TypeError, match="requires_grad"):
        w.requires_grad_("no")
    assert w.requires_grad


def test_inference_mode_is_no_grad_as_context_and_decorator():
    w = ndl.Tensor([1.0, 2.0])
    with ndl.inference_mode():
        assert not ndl.is_grad_enabled()
        assert (w * 2).op is None
    assert ndl.is_grad_enabled()

    @ndl.inference_mode
    def bare(x):
        return x * 2

    @ndl.inference_mode()
    def called(x):
        return x * 2

    assert not bare(w).requires_grad and not called(w).requires_grad
    with ndl.inference_mode(False):
        assert ndl.is_grad_enabled()
    with ndl.no_grad(), ndl.inference_mode(False):
        assert not ndl.is_grad_enabled()  # False leaves the mode as it is, as in PyTorch
    with pytest.raises(TypeError, match="inference_mode"):
        ndl.inference_mode("yes")


def test_inference_mode_restores_the_mode_after_an_exception():
    with pytest.raises(KeyError):
        with ndl.inference_mode():
            raise KeyError("boom")
    assert ndl.is_grad_enabled()
