"""Tensor: the Value users hold, with operators, conversion and ``backward``."""
import numpy

from . import autograd
from .autograd import Value
from .backend_ndarray import NDArray, default_device, resolve_dtype
from .backward import compute_gradient_data, compute_gradient_of_variables

_FLOAT64 = numpy.dtype("float64")
_FLOAT32 = numpy.dtype("float32")


def _to_array(array, device, dtype):
    """An NDArray on ``device`` from numpy/CuPy arrays, NDArrays or nested lists."""
    if isinstance(array, NDArray):
        data = array.to(device)
        if dtype is not None and data.dtype != dtype:
            data = data.astype(dtype)
        return data
    if isinstance(array, (numpy.generic, numpy.ndarray)) or hasattr(array, "__cuda_array_interface__"):
        if dtype is None and array.dtype == _FLOAT64:
            dtype = _FLOAT32  # float32 by default, as the course's NDArray does
        data = NDArray(array, device=device, dtype=dtype)
        if data.raw is array or getattr(data.raw, "base", None) is array:
            # NOTE: a Tensor owns its data, as in the course and torch.tensor: optimizers update
            # parameters in place, which must never write into the caller's array. Wrap an
            # NDArray (ndl.Tensor(ndl.NDArray(a))) to share memory on purpose.
            data = NDArray.make(data.raw.copy(), data.device)
        return data
    if isinstance(array, (str, bytes, dict, set)) or array is None:
        raise TypeError(
            f"Tensor needs numbers: got {type(array).__name__} {array!r}; "
            "pass a number, a (nested) list of numbers, or a numpy array"
        )
    try:
        raw = device.array(array, dtype=dtype)
    except (ValueError, TypeError) as error:
        raise TypeError(
            f"Tensor needs numbers: could not make an array from {type(array).__name__} "
            f"{str(array)[:80]}: {error}"
        ) from error
    if raw.dtype.kind not in "biuf":
        raise TypeError(f"Tensor needs numbers: got elements of dtype {raw.dtype} from {str(array)[:80]}")
    return NDArray.make(raw, device)


def _device_of(array):
    if isinstance(array, NDArray):
        return array.device
    if hasattr(array, "__cuda_array_interface__"):
        from .backend_ndarray import cuda

        return cuda()
    return default_device()


class Tensor(Value):
    """An n-dimensional array that records the operations applied to it.

    Args:
        array: numbers (a Tensor, NDArray, numpy or CuPy array, or nested lists).
        device: ``ndl.cpu()`` (default) or ``ndl.cuda()``.
        dtype: element type; lists and float64 arrays become float32 unless you ask otherwise.
        requires_grad: whether ``backward`` computes a gradient for it (default True).

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([[1.0, 2.0]], requires_grad=True)
        >>> y = (x * x).sum()
        >>> y.backward()
        >>> x.grad
        needle.Tensor([[2. 4.]])
    """

    __slots__ = ()
    __array_priority__ = 1000  # a numpy scalar on the left (np.float64(2) * t) defers to Tensor's operators

    def __init__(self, array, *, device=None, dtype=None, requires_grad=True, **kwargs):
        if dtype is not None:
            dtype = resolve_dtype(dtype)
        if isinstance(array, Tensor):
            data = array.realize_cached_data()
            device = device or data.device
            if device is not data.device or (dtype is not None and dtype != data.dtype):
                data = _to_array(data, device, dtype)
        else:
            data = _to_array(array, device or _device_of(array), dtype)
        self._init(None, (), cached_data=data, requires_grad=requires_grad)

    @staticmethod
    def from_numpy(numpy_array, dtype):
        """The course's helper: an NDArray from a numpy array."""
        return NDArray(numpy_array, dtype=dtype)

    # ---- data access ----------------------------------------------------------------------
    @property
    def data(self):
        """The same array without the graph (a detached Tensor); assign to replace the array."""
        return self.detach()

    @data.setter
    def data(self, value):
        if isinstance(value, Tensor):
            new_data = value.realize_cached_data()
        else:
            new_data = _to_array(value, self.device, self.dtype)
        if new_data.dtype != self.dtype:
            raise TypeError(
                f"cannot assign data of dtype {new_data.dtype} to a tensor of dtype {self.dtype}: "
                f"convert it first, e.g. ndl.Tensor(value, dtype='{self.dtype}')"
            )
        self._replace_data(new_data)

    def detach(self):
        """A new leaf Tensor sharing this one's array, with no inputs and no op."""
        return Tensor.make_const(self.realize_cached_data())

    @property
    def shape(self):
        return self.realize_cached_data().shape

    @property
    def dtype(self):
        return self.realize_cached_data().dtype

    @property
    def device(self):
        return self.realize_cached_data().device

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return self.realize_cached_data().size

    def numpy(self):
        """The values as a numpy array (shared with the tensor on CPU, copied from a GPU)."""
        return self.realize_cached_data().numpy()

    def item(self):
        """The single value of a one-element tensor as a Python number."""
        data = self.realize_cached_data()
        if data.size != 1:
            raise ValueError(f"item() needs a tensor with one element; this one has shape {data.shape}")
        return data.raw.item()

    def __float__(self):
        return float(self.item())

    def __bool__(self):
        data = self.realize_cached_data()
        if data.size != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {data.shape} is ambiguous: "
                "compare a scalar (e.g. loss.item() > 0) or reduce first with .sum()"
            )
        return bool(data.raw.item())

    def __len__(self):
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        return self.realize_cached_data().__array__(dtype, copy)

    def __repr__(self):
        return "needle.Tensor(" + str(self.realize_cached_data()) + ")"

    def __str__(self):
        return str(self.realize_cached_data())

    def to(self, device):
        """This tensor's values on ``device`` (a new leaf; itself when already there)."""
        if device is self.device:
            return self
        return Tensor(self, device=device, requires_grad=self.requires_grad)

    # ---- differentiation ------------------------------------------------------------------
    def backward(self, out_grad=None, create_graph=True):
        """Compute gradients of this tensor with respect to every tensor it depends on.

        Args:
            out_grad: the gradient flowing in, of this tensor's shape. Omitted, it is all ones,
                as in the course, also for a tensor of many elements (PyTorch raises there):
                ``y.backward()`` then gives the gradient of ``y.sum()``.
            create_graph: True (the course's default) builds the gradients as Tensor graphs,
                so gradients of gradients work, and every node of the graph gets its ``.grad``,
                constants included (a data batch, a detached weight). False runs the fast
                path: plain arrays, only leaves that require grad get ``.grad``, no graph is kept.

        Each ``.grad`` has its tensor's dtype; integer and bool tensors (labels) get none. It
        raises RuntimeError when this tensor needs no gradient, and when a tensor of the graph
        had its data changed after the graph was built (then no ``.grad`` is touched).

        Example:
            >>> import needle as ndl
            >>> x = ndl.Tensor([1.0, 2.0, 3.0])
            >>> (x * x).backward()  # seeded with ones: the gradient of (x * x).sum()
            >>> x.grad
            needle.Tensor([2. 4. 6.])
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward() called on a tensor that does not require grad: it was made from "
                "constants, under no_grad(), or by detach(), so no graph leads back to any "
                "parameter. Create the inputs with requires_grad=True and compute it outside no_grad()."
            )
        data = self.realize_cached_data()
        if data.dtype.kind != "f":
            raise RuntimeError(
                f"backward() needs a floating-point tensor, this one has dtype {data.dtype}: "
                "gradients are defined for float tensors only (compute the loss in float32)"
            )
        if out_grad is None:
            # NOTE: all ones whatever the shape, as the course's backward seeds (PyTorch raises).
            out_grad_data = NDArray.make(data.device.xp.ones(data.shape, dtype=data.dtype), data.device)
        else:
            out_grad_data = out_grad.realize_cached_data() if isinstance(out_grad, Value) else NDArray(
                out_grad, device=data.device, dtype=data.dtype
            )
            if out_grad_data.shape != data.shape:
                raise ValueError(f"out_grad has shape {out_grad_data.shape}, the tensor has shape {data.shape}")
        if create_graph:
            grad = out_grad if isinstance(out_grad, Tensor) else Tensor.make_const(out_grad_data)
            traversed = compute_gradient_of_variables(self, grad)
        else:
            traversed = compute_gradient_data(self, out_grad_data, Tensor.make_const)
        autograd._count_backward_call(traversed)

    # ---- operators ------------------------------------------------------------------------
    def __add__(self, other):
        if isinstance(other, Tensor):
            return ops.EWiseAdd()(self, other)
        return ops.AddScalar(other)(self)

    __radd__ = __add__

    def __mul__(self, other):
        if isinstance(other, Tensor):
            return ops.EWiseMul()(self, other)
        return ops.MulScalar(other)(self)

    __rmul__ = __mul__

    def __pow__(self, other):
        if isinstance(other, Tensor):
            return ops.EWisePow()(self, other)
        return ops.PowerScalar(other)(self)

    def __rpow__(self, other):
        return ops.EWisePow()(Tensor(other, device=self.device, dtype=self.dtype, requires_grad=False), self)

    def __sub__(self, other):
        if isinstance(other, Tensor):
            return ops.EWiseAdd()(self, ops.Negate()(other))
        return ops.AddScalar(-other)(self)

    def __rsub__(self, other):
        return ops.AddScalar(other)(ops.Negate()(self))

    def __truediv__(self, other):
        if isinstance(other, Tensor):
            return ops.EWiseDiv()(self, other)
        return ops.DivScalar(other)(self)

    def __rtruediv__(self, other):
        return ops.MulScalar(other)(ops.PowerScalar(-1)(self))

    def __matmul__(self, other):
        return ops.MatMul()(self, other)

    def __neg__(self):
        return ops.Negate()(self)

    def matmul(self, other):
        return ops.MatMul()(self, other)

    def sum(self, axes=None):
        return ops.Summation(axes)(self)

    def broadcast_to(self, shape):
        return ops.BroadcastTo(shape)(self)

    def reshape(self, shape):
        return ops.Reshape(shape)(self)

    def transpose(self, axes=None):
        return ops.Transpose(axes)(self)

    def exp(self):
        return ops.Exp()(self)

    def log(self):
        return ops.Log()(self)

    def relu(self):
        return ops.ReLU()(self)

    def tanh(self):
        return ops.Tanh()(self)

    def sigmoid(self):
        return ops.Sigmoid()(self)


from . import ops  # noqa: E402  (ops build on Tensor)
