"""Element-wise arithmetic and activations: each op a class plus the course's function name."""
from ..autograd import TensorOp
from ..backend_ndarray import NDArray
from ._shapes import python_scalar, unbroadcast, unbroadcast_data

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


def add(a, b):
    return EWiseAdd()(a, b)


class AddScalar(TensorOp):
    """a + scalar."""

    def __init__(self, scalar):
        self.scalar = python_scalar(scalar, "AddScalar")

    def compute(self, a: NDArray):
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad

    def gradient_data(self, out_grad, node):
        return (out_grad,)


def add_scalar(a, scalar):
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


def multiply(a, b):
    return EWiseMul()(a, b)


class MulScalar(TensorOp):
    """a * scalar."""

    def __init__(self, scalar):
        self.scalar = python_scalar(scalar, "MulScalar")

    def compute(self, a: NDArray):
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar

    def gradient_data(self, out_grad, node):
        return (out_grad * self.scalar,)


def mul_scalar(a, scalar):
    return MulScalar(scalar)(a)


class EWisePow(TensorOp):
    """a ** b element-wise; the gradient in b needs a > 0."""

    def compute(self, a: NDArray, b: NDArray):
        return a**b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        grad_a = out_grad * b * a ** (b - 1)
        grad_b = out_grad * node * log(a)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def power(a, b):
    return EWisePow()(a, b)


class PowerScalar(TensorOp):
    """a ** scalar, for a number ``scalar`` (integer or not)."""

    def __init__(self, scalar):
        self.scalar = python_scalar(scalar, "PowerScalar")

    def compute(self, a: NDArray):
        return a**self.scalar

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        return out_grad * self.scalar * a ** (self.scalar - 1)


def power_scalar(a, scalar):
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


def divide(a, b):
    return EWiseDiv()(a, b)


class DivScalar(TensorOp):
    """a / scalar."""

    def __init__(self, scalar):
        self.scalar = python_scalar(scalar, "DivScalar")

    def compute(self, a: NDArray):
        return a / self.scalar

    def gradient(self, out_grad, node):
        return out_grad / self.scalar

    def gradient_data(self, out_grad, node):
        return (out_grad / self.scalar,)


def divide_scalar(a, scalar):
    return DivScalar(scalar)(a)


class Negate(TensorOp):
    """-a."""

    def compute(self, a: NDArray):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad

    def gradient_data(self, out_grad, node):
        return (-out_grad,)


def negate(a):
    return Negate()(a)


class Log(TensorOp):
    """Natural logarithm."""

    def compute(self, a: NDArray):
        return a.log()

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]

    def gradient_data(self, out_grad, node):
        return (out_grad / node.inputs[0].cached_data,)


def log(a):
    return Log()(a)


class Exp(TensorOp):
    """e ** a."""

    def compute(self, a: NDArray):
        return a.exp()

    def gradient(self, out_grad, node):
        return out_grad * exp(node.inputs[0])

    def gradient_data(self, out_grad, node):
        return (out_grad * node.cached_data,)


def exp(a):
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
        return (_make(device.fused.relu_backward(out_grad.raw, node.cached_data.raw), device),)


def relu(a):
    return ReLU()(a)


class ReLUBackward(TensorOp):
    """``out_grad`` where the ReLU's output ``relu_output`` (an array, not an input) is positive, else 0.

    ReLU's gradient as one node; it is linear in ``out_grad``, so its own gradient is itself.
    """

    def __init__(self, relu_output: NDArray):
        self.relu_output = relu_output

    def compute(self, out_grad: NDArray):
        device = out_grad.device
        return _make(device.fused.relu_backward(out_grad.raw, self.relu_output.raw), device)

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


def tanh(a):
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


def sigmoid(a):
    return Sigmoid()(a)
