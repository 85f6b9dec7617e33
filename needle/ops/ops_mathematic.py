"""Element-wise arithmetic and activations: each op a class plus the course's function name.

Dtypes follow numpy's promotion in the forward pass. Two tensors give the wider type (float32 +
float64 -> float64, int64 * float32 -> float64). A scalar keeps a float tensor's dtype (float32 *
2.5 -> float32); a float scalar makes an integer tensor float64 (int64 + 0.5 -> float64). A
scalar is a Python number, a numpy scalar or a one-element array, all taken as the Python number
they hold, so ``t * np.float64(2)`` stays float32. Gradients do not promote: every tensor's
``.grad`` has that tensor's own dtype (see ``needle.backward``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy

from ..autograd import TensorOp
from ..backend_ndarray import NDArray, resolve_dtype
from ._shapes import python_scalar, unbroadcast, unbroadcast_data

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from ..tensor import Tensor

# Shape, reduction and matmul ops live in ops_shape; re-exported here for course imports.
from .ops_shape import (  # noqa: F401
    BroadcastTo,
    Dilate,
    Flip,
    MatMul,
    Reshape,
    Stack,
    Summation,
    Transpose,
    UnDilate,
    broadcast_to,
    dilate,
    flip,
    matmul,
    reshape,
    stack,
    summation,
    transpose,
    undilate,
)
from .ops_tuple import Split, split  # noqa: F401,E402  (the course's ops_mathematic holds split)
from .ops_conv import Conv, conv  # noqa: F401,E402  (the course defines conv in ops_mathematic)


def _make(raw, device):
    return NDArray.wrap(raw, device)


def scalar_value(scalar: Any, op_name: str) -> int | float:
    """The Python number a scalar op uses: ``scalar`` itself, a numpy scalar's value, or the one
    element of a one-element array (numpy, CuPy or NDArray), as the course's scalar ops accept.

    A larger array is refused with a TypeError naming the op and the array's shape.

    Example:
        >>> import numpy as np
        >>> scalar_value(np.array([2.5], dtype=np.float32), "MulScalar")
        2.5
    """
    array = scalar.raw if isinstance(scalar, NDArray) else scalar
    if isinstance(array, numpy.ndarray) or hasattr(array, "__cuda_array_interface__"):
        if array.size != 1:
            raise TypeError(
                f"{op_name} takes a Python number, got {type(scalar).__name__} of shape {array.shape}: "
                "a scalar op takes a number or a one-element array; for an array operand make it a "
                "Tensor and use the element-wise op (e.g. a * ndl.Tensor(array))"
            )
        scalar = array.item()
    return python_scalar(scalar, op_name)


class EWiseAdd(TensorOp):
    """a + b, with numpy broadcasting (gradients are summed back to each input's shape)."""

    def compute(self, a: NDArray, b: NDArray):
        return a + b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad, a.shape), unbroadcast(out_grad, b.shape)

    def gradient_data(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast_data(out_grad, a.cached_data.shape), unbroadcast_data(out_grad, b.cached_data.shape)


def add(a: Tensor, b: Tensor) -> Tensor:
    return EWiseAdd()(a, b)


class AddScalar(TensorOp):
    """a + scalar."""

    def __init__(self, scalar):
        self.scalar = scalar_value(scalar, "AddScalar")

    def compute(self, a: NDArray):
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad

    def gradient_data(self, out_grad, node):
        return (out_grad,)


def add_scalar(a: Tensor, scalar: float) -> Tensor:
    return AddScalar(scalar)(a)


class EWiseMul(TensorOp):
    """a * b, with numpy broadcasting."""

    def compute(self, a: NDArray, b: NDArray):
        return a * b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad * b, a.shape), unbroadcast(out_grad * a, b.shape)

    def gradient_data(self, out_grad, node):
        a, b = node.inputs
        a_data, b_data = a.cached_data, b.cached_data
        grad_a = unbroadcast_data(out_grad * b_data, a_data.shape) if a.requires_grad else None
        grad_b = unbroadcast_data(out_grad * a_data, b_data.shape) if b.requires_grad else None
        return grad_a, grad_b

    def constant_input_gradients(self, out_grad, node):
        # NOTE: a Dropout mask or a one-hot label matrix: only its own product, not both again
        a, b = node.inputs
        a_data, b_data = a.cached_data, b.cached_data
        grad_a = None if a.requires_grad else unbroadcast_data(out_grad * b_data, a_data.shape)
        grad_b = None if b.requires_grad else unbroadcast_data(out_grad * a_data, b_data.shape)
        return grad_a, grad_b


def multiply(a: Tensor, b: Tensor) -> Tensor:
    return EWiseMul()(a, b)


class MulScalar(TensorOp):
    """a * scalar."""

    def __init__(self, scalar):
        self.scalar = scalar_value(scalar, "MulScalar")

    def compute(self, a: NDArray):
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar

    def gradient_data(self, out_grad, node):
        return (out_grad * self.scalar,)


def mul_scalar(a: Tensor, scalar: float) -> Tensor:
    return MulScalar(scalar)(a)


class EWisePow(TensorOp):
    """a ** b element-wise; the gradient in b is real where a > 0, and 0 where a == 0 and b >= 0."""

    def compute(self, a: NDArray, b: NDArray):
        return a**b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        a_data, b_data = a.realize_cached_data(), b.realize_cached_data()
        # NOTE: as in PyTorch, d(a**b)/db = a**b * log(a) is taken as 0 where a == 0 and b >= 0
        # (0 * log 0 would be nan), and d(a**b)/da = b * a**(b - 1) as 0 where b == 0. Adding 1
        # to a at those points (a constant mask) keeps both formulas finite and differentiable.
        a_zero = (a_data == 0).astype(a_data.dtype)
        base_for_a = a + _constant(a_zero * (b_data == 0).astype(a_data.dtype))
        base_for_b = a + _constant(a_zero * (b_data >= 0).astype(a_data.dtype))
        grad_a = out_grad * b * base_for_a ** (b - 1)
        grad_b = out_grad * node * log(base_for_b)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def _constant(array: NDArray):
    """``array`` as a constant Tensor (a mask the gradient adds, with no gradient of its own)."""
    from ..tensor import Tensor

    return Tensor.make_const(array)


def power(a: Tensor, b: Tensor) -> Tensor:
    return EWisePow()(a, b)


class PowerScalar(TensorOp):
    """a ** scalar, for a number ``scalar`` (integer or not)."""

    def __init__(self, scalar):
        self.scalar = scalar_value(scalar, "PowerScalar")

    def compute(self, a: NDArray):
        return a**self.scalar

    def gradient(self, out_grad, node):
        if self.scalar == 0:
            return out_grad * 0  # NOTE: a ** 0 is 1 everywhere, also at a == 0 (PyTorch's rule)
        a = node.inputs[0]
        return out_grad * self.scalar * a ** (self.scalar - 1)


def power_scalar(a: Tensor, scalar: float) -> Tensor:
    return PowerScalar(scalar)(a)


class EWiseDiv(TensorOp):
    """a / b element-wise, with numpy broadcasting."""

    def compute(self, a: NDArray, b: NDArray):
        return a / b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        grad_a = out_grad / b
        grad_b = -out_grad * a / (b * b)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def divide(a: Tensor, b: Tensor) -> Tensor:
    return EWiseDiv()(a, b)


class DivScalar(TensorOp):
    """a / scalar."""

    def __init__(self, scalar):
        self.scalar = scalar_value(scalar, "DivScalar")

    def compute(self, a: NDArray):
        return a / self.scalar

    def gradient(self, out_grad, node):
        return out_grad / self.scalar

    def gradient_data(self, out_grad, node):
        return (out_grad / self.scalar,)


def divide_scalar(a: Tensor, scalar: float) -> Tensor:
    return DivScalar(scalar)(a)


class Negate(TensorOp):
    """-a."""

    def compute(self, a: NDArray):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad

    def gradient_data(self, out_grad, node):
        return (-out_grad,)


def negate(a: Tensor) -> Tensor:
    return Negate()(a)


class Log(TensorOp):
    """Natural logarithm."""

    def compute(self, a: NDArray):
        return a.log()

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]

    def gradient_data(self, out_grad, node):
        return (out_grad / node.inputs[0].cached_data,)


def log(a: Tensor) -> Tensor:
    return Log()(a)


class Exp(TensorOp):
    """e ** a."""

    def compute(self, a: NDArray):
        return a.exp()

    def gradient(self, out_grad, node):
        return out_grad * exp(node.inputs[0])

    def gradient_data(self, out_grad, node):
        return (out_grad * node.cached_data,)


def exp(a: Tensor) -> Tensor:
    return Exp()(a)


class ReLU(TensorOp):
    """max(a, 0)."""

    def compute(self, a: NDArray):
        return a.maximum(0)

    def gradient(self, out_grad, node):
        # NOTE: at the kink a == 0 the gradient is taken as 0, as in PyTorch and the course.
        return ReLUBackward(node.realize_cached_data())(out_grad)

    def gradient_data(self, out_grad, node):
        device = out_grad.device
        return (_make(device.kernels.relu_backward(out_grad.raw, node.cached_data.raw), device),)


def relu(a: Tensor) -> Tensor:
    return ReLU()(a)


class ReLUBackward(TensorOp):
    """``out_grad`` where the ReLU's output ``relu_output`` (an array, not an input) is positive, else 0.

    ReLU's gradient as one node; it is linear in ``out_grad``, so its own gradient is itself.
    """

    def __init__(self, relu_output: NDArray):
        self.save_for_backward(relu_output)

    @property
    def relu_output(self) -> NDArray:
        """The ReLU's output (saved)."""
        return self.saved_arrays[0]

    def compute(self, out_grad: NDArray):
        device = out_grad.device
        return _make(device.kernels.relu_backward(out_grad.raw, self.relu_output.raw), device)

    def gradient(self, adjoint, node):
        return ReLUBackward(self.relu_output)(adjoint)


class Tanh(TensorOp):
    """Hyperbolic tangent."""

    def compute(self, a: NDArray):
        return a.tanh()

    def gradient(self, out_grad, node):
        return out_grad * (1 - node * node)

    def gradient_data(self, out_grad, node):
        output = node.cached_data
        return (out_grad * (1 - output * output),)


def tanh(a: Tensor) -> Tensor:
    return Tanh()(a)


class Sigmoid(TensorOp):
    """1 / (1 + e ** -a), computed without overflow for large |a|."""

    def compute(self, a: NDArray):
        # NOTE: 0.5 * (1 + tanh(a / 2)) equals the logistic function and never overflows.
        return 0.5 * (1 + (a * 0.5).tanh())

    def gradient(self, out_grad, node):
        return out_grad * node * (1 - node)

    def gradient_data(self, out_grad, node):
        output = node.cached_data
        return (out_grad * output * (1 - output),)


def sigmoid(a: Tensor) -> Tensor:
    return Sigmoid()(a)


class AsType(TensorOp):
    """``a`` converted to ``dtype``; the gradient is converted back to ``a``'s dtype.

    ``backward`` uses it to give each node a gradient of the node's own dtype.
    """

    def __init__(self, dtype):
        self.dtype = resolve_dtype(dtype)

    def compute(self, a: NDArray):
        return a.astype(self.dtype)

    def gradient(self, out_grad, node):
        return astype(out_grad, node.inputs[0].dtype)

    def gradient_data(self, out_grad, node):
        return (out_grad.astype(node.inputs[0].cached_data.dtype),)


def astype(a: Tensor, dtype: DTypeLike) -> Tensor:
    """``a`` as ``dtype`` (a numpy dtype or its name), differentiably.

    Example:
        >>> import needle as ndl
        >>> astype(ndl.Tensor([1.5, 2.0]), "float64").dtype
        dtype('float64')
    """
    return AsType(dtype)(a)
