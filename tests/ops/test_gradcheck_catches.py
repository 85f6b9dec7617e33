"""The gradient checker itself: it must reject a wrong gradient, on either backward path."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.autograd import Op
from gradcheck import check_gradients

X = np.array([[0.3, -0.8], [1.1, 0.5]])


class ExpWithWrongGradient(ops.Exp):
    """exp, whose gradient is off by 10%; gradient_data falls back to the (wrong) gradient."""

    def gradient(self, out_grad, node):
        return out_grad * ops.exp(node.inputs[0]) * 1.1

    gradient_data = Op.gradient_data


class ExpWithWrongFastGradient(ops.Exp):
    """exp, right on the graph path but wrong on the array path that both backward() calls take."""

    def gradient_data(self, out_grad, node):
        return (out_grad * node.cached_data * 0.9,)


class ExpWithWrongGraphGradient(ops.Exp):
    """exp, right on the array path but wrong in the gradient graph (what second order differentiates)."""

    def gradient(self, out_grad, node):
        return out_grad * ops.exp(node.inputs[0]) * 1.1


def test_checker_accepts_the_right_gradient(device):
    check_gradients(ops.exp, [X], device)


def test_checker_catches_a_wrong_gradient(device):
    with pytest.raises(AssertionError, match=r"create_graph=True\) differs from central differences"):
        check_gradients(lambda x: ExpWithWrongGradient()(x), [X], device)


def test_checker_catches_a_wrong_array_path_gradient(device):
    with pytest.raises(AssertionError, match=r"create_graph=True\) differs from central differences"):
        check_gradients(lambda x: ExpWithWrongFastGradient()(x), [X], device)


def test_checker_catches_a_wrong_gradient_graph(device):
    with pytest.raises(AssertionError, match=r"create_graph=graph\) differs from central differences"):
        check_gradients(lambda x: ExpWithWrongGraphGradient()(x), [X], device)


def test_checker_catches_a_missing_gradient(device):
    class Detached(ops.Exp):
        def __call__(self, x):
            return ndl.Tensor(super().__call__(x).numpy(), device=x.device, requires_grad=False) * x

    with pytest.raises(AssertionError):
        check_gradients(lambda x: Detached()(x), [X], device)
