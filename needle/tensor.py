"""Tensor: the Value users hold, with operators, conversion and ``backward``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy

from . import autograd, backend_selection
from .autograd import Value
from .backend_ndarray import Device, NDArray, as_device, device_of, resolve_dtype
from .backward import compute_gradient_data, compute_gradient_of_variables

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import DTypeLike

# NOTE: a Tensor holds real numbers or booleans: numpy kinds b(ool), i(nt), u(nsigned), f(loat).
_NUMERIC_KINDS = "biuf"
_DTYPE_FIXES = {
    "c": "keep the real part (x.real) or split real and imaginary parts into two tensors",
    "O": "some elements are not numbers (None, strings, lists); replace them with numbers",
    "U": "strings are not parsed: convert them first, e.g. numpy.asarray(x, dtype='float32')",
    "S": "bytes are not parsed: convert them first, e.g. numpy.asarray(x, dtype='float32')",
    "M": "convert dates to numbers first, e.g. x.astype('int64') (ticks since the epoch)",
    "m": "convert durations to numbers first, e.g. x / numpy.timedelta64(1, 's') (seconds)",
    "V": "structured arrays are not supported: pass one numeric field, e.g. x['field']",
}


def check_numeric_dtype(dtype: numpy.dtype, given: str) -> None:
    """Raise TypeError unless ``dtype`` is a real number or bool type; ``given`` says what it came from."""
    if dtype.kind in _NUMERIC_KINDS:
        return
    fix = _DTYPE_FIXES.get(dtype.kind, "pass real numbers or booleans")
    raise TypeError(
        f"Tensor needs numbers: got dtype {dtype} from {given}, which is not a real number or "
        f"bool type; {fix}"
    )


def _describe(array: Any) -> str:
    """A short description of a constructor argument for error messages."""
    text = repr(array)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(array).__name__} {text}"


def _copy_of(data: NDArray, device: Device | None, dtype: numpy.dtype | None) -> NDArray:
    """A new array with ``data``'s values on ``device`` as ``dtype`` (each None: keep ``data``'s)."""
    device = device or data.device
    if device is not data.device:
        data = data.to(device)  # a copy on the other device
        return data if dtype is None or dtype == data.dtype else data.astype(dtype)
    if dtype is not None and dtype != data.dtype:
        return data.astype(dtype)
    return NDArray.wrap(data.raw.copy(), data.device)


def _to_array(array: Any, device: Device, dtype: numpy.dtype | None) -> NDArray:
    """An NDArray on ``device`` from numpy/CuPy arrays, NDArrays or nested lists."""
    if dtype is not None:
        check_numeric_dtype(dtype, f"dtype={dtype.name!r}")
    if isinstance(array, NDArray):
        check_numeric_dtype(array.dtype, "NDArray")
        data = array.to(device)
        if dtype is not None and data.dtype != dtype:
            data = data.astype(dtype)
        return data
    if isinstance(array, (numpy.generic, numpy.ndarray)) or hasattr(array, "__cuda_array_interface__"):
        check_numeric_dtype(array.dtype, f"{type(array).__module__}.{type(array).__name__}")
        if dtype is None:
            dtype = backend_selection.default_dtype(array)  # float32 under "nd", numpy's under "np"
        data = NDArray(array, device=device, dtype=dtype)
        if data.raw is array or getattr(data.raw, "base", None) is array:
            # NOTE: a Tensor owns its data, as in the course and torch.tensor: optimizers update
            # parameters in place, which must never write into the caller's array. Wrap an
            # NDArray (ndl.Tensor(ndl.NDArray(a))) to share memory on purpose.
            data = NDArray.wrap(data.raw.copy(), data.device)
        return data
    if isinstance(array, (str, bytes, dict, set)) or array is None:
        raise TypeError(
            f"Tensor needs numbers: got {_describe(array)}; "
            "pass a number, a (nested) list of numbers, or a numpy array"
        )
    try:
        host = numpy.asarray(array)  # the elements' own dtype, to refuse strings and None
    except (ValueError, TypeError) as error:
        raise TypeError(
            f"Tensor needs numbers: could not make an array from {_describe(array)} "
            f"(rows of different lengths?): {error}"
        ) from error
    check_numeric_dtype(host.dtype, _describe(array))
    if dtype is None:
        dtype = backend_selection.default_dtype(array)  # lists: float32 under "nd", numpy's under "np"
    return NDArray.wrap(device.array(host, dtype=dtype), device)


def _check_flag(value: Any, name: str) -> bool:
    """``value`` as a bool, refusing anything but True/False (a typo'd ``"False"`` would be true)."""
    if isinstance(value, (bool, numpy.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {_describe(value)}")



class Tensor(Value):
    """An n-dimensional array that records the operations applied to it.

    Args:
        array: real numbers or booleans: a Tensor, NDArray, numpy or CuPy array, a number or
            nested lists. The values are copied (``Tensor(t)`` of a Tensor too); ``t.detach()``
            shares them, and so does wrapping an NDArray (``Tensor(ndl.NDArray(a))``), the way
            to share memory on purpose. Complex, string, object and date arrays are refused.
        device: ``ndl.cpu()`` (default), ``ndl.cuda()``, or a name: "cpu", "cuda", "cuda:0".
        dtype: element type; by default lists and float64 arrays become float32 (numpy's inferred
            dtype under ``NEEDLE_BACKEND=np``, see :mod:`needle.backend_selection`).
        requires_grad: whether ``backward`` computes a gradient for it (default True).

    Raises:
        TypeError: for data that is not real numbers or booleans, naming the dtype it got, and
            for any keyword other than ``device``, ``dtype`` and ``requires_grad``.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([[1.0, 2.0]], requires_grad=True)
        >>> y = (x * x).sum()
        >>> y.backward()
        >>> x.grad  # a graph node: the course's gradients can be differentiated again
        needle.Tensor([[2. 4.]], op=GradientGraph)
        >>> snapshot = ndl.Tensor(x)  # a copy: later changes to x do not reach it
        >>> x.data = x * 0
        >>> snapshot
        needle.Tensor([[1. 2.]])
    """

    __slots__ = ()
    __array_priority__ = 1000  # a numpy scalar on the left (np.float64(2) * t) defers to Tensor's operators

    def __init__(
        self,
        array: Any,
        *,
        device: Device | str | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool = True,
    ) -> None:
        if dtype is not None:
            dtype = resolve_dtype(dtype)
        if device is not None:
            device = as_device(device)
        requires_grad = _check_flag(requires_grad, "requires_grad")
        if isinstance(array, Tensor):
            data = array.realize_cached_data()
            if dtype is not None:
                check_numeric_dtype(dtype, f"dtype={dtype.name!r}")
            data = _copy_of(data, device, dtype)
        else:
            data = _to_array(array, device or device_of(array), dtype)
        self._init(None, (), cached_data=data, requires_grad=requires_grad)

    @staticmethod
    def from_numpy(numpy_array: np.ndarray, dtype: DTypeLike) -> NDArray:
        """The course's helper: an NDArray from a numpy array."""
        return NDArray(numpy_array, dtype=dtype)

    # ---- data access ----------------------------------------------------------------------
    @property
    def data(self) -> Tensor:
        """The same array without the graph (a detached Tensor); assign to replace the array."""
        return self.detach()

    @data.setter
    def data(self, value: Any) -> None:
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

    def detach(self) -> Tensor:
        """A new leaf Tensor sharing this one's array, with no inputs and no op."""
        return Tensor.make_const(self.realize_cached_data())

    @property
    def shape(self) -> tuple[int, ...]:
        return self.realize_cached_data().shape

    @property
    def dtype(self) -> np.dtype:
        return self.realize_cached_data().dtype

    @property
    def device(self) -> Device:
        return self.realize_cached_data().device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.realize_cached_data().size

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (shared with the tensor on CPU, copied from a GPU)."""
        return self.realize_cached_data().numpy()

    def item(self) -> int | float | bool:
        """The single value of a one-element tensor as a Python number."""
        data = self.realize_cached_data()
        if data.size != 1:
            raise ValueError(f"item() needs a tensor with one element; this one has shape {data.shape}")
        return data.raw.item()

    def __float__(self) -> float:
        return float(self.item())

    def __bool__(self) -> bool:
        data = self.realize_cached_data()
        if data.size != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {data.shape} is ambiguous: "
                "compare a scalar (e.g. loss.item() > 0) or reduce first with .sum()"
            )
        return bool(data.raw.item())

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor: it has no first axis; use .item() for its value")
        return shape[0]

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        return self.realize_cached_data().__array__(dtype, copy)

    def __repr__(self) -> str:
        """``needle.Tensor(values)``, with the device when not the CPU and the op that made it, if any."""
        data = self.realize_cached_data()
        text = "needle.Tensor(" + str(data)
        if data.device.name != "cpu":
            text += f", device={data.device!r}"
        if self.op is not None:
            text += f", op={type(self.op).__name__}"
        return text + ")"

    def __str__(self) -> str:
        return str(self.realize_cached_data())

    def to(self, device: Device | str) -> Tensor:
        """This tensor's values on ``device`` (a new leaf; itself when already there).

        Args:
            device: ``ndl.cpu()``, ``ndl.cuda()`` or a name: "cpu", "cuda", "cuda:0".

        Example:
            >>> import needle as ndl
            >>> t = ndl.Tensor([1.0])
            >>> t.to("cpu") is t
            True
        """
        device = as_device(device)
        if device is self.device:
            return self
        return Tensor(self, device=device, requires_grad=self.requires_grad)

    # ---- differentiation ------------------------------------------------------------------
    def backward(self, out_grad: Tensor | None = None, create_graph: bool | None = None) -> None:
        """Compute gradients of this tensor with respect to every tensor it depends on.

        Args:
            out_grad: the gradient flowing in, of this tensor's shape. Omitted, it is all ones,
                as in the course, also for a tensor of many elements (PyTorch raises there):
                ``y.backward()`` then gives the gradient of ``y.sum()``.
            create_graph: None (the course's default): every node of the graph gets its
                ``.grad``, constants included (a data batch, a detached weight), and a leaf's
                gradient can be differentiated again while this tensor is alive (its graph is
                built then, see :mod:`needle.gradient_graph`). True: the same, and the gradients
                keep the graph alive themselves, as PyTorch's ``create_graph=True`` (each leaf
                and its gradient then refer to each other until the garbage collector frees
                them). False: the fast path: only leaves that require grad get ``.grad``, plain
                arrays, no graph is kept.

        Each ``.grad`` has its tensor's dtype; integer and bool tensors (labels) get none, except
        under ``NEEDLE_BACKEND=np``, where an integer tensor's backward() gives its integer inputs
        integer-valued gradients (seeded with integer ones), as the course's numpy backend does. It
        raises RuntimeError when this tensor needs no gradient, and when a tensor of the graph
        had its data changed after the graph was built (then no ``.grad`` is touched).

        Example:
            >>> import needle as ndl
            >>> x = ndl.Tensor([1.0, 2.0, 3.0])
            >>> (x * x).backward()  # seeded with ones: the gradient of (x * x).sum()
            >>> x.grad  # a graph node itself, so that it can be differentiated again
            needle.Tensor([2. 4. 6.], op=GradientGraph)
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward() called on a tensor that does not require grad: it was made from "
                "constants, under no_grad(), or by detach(), so no graph leads back to any "
                "parameter. Create the inputs with requires_grad=True and compute it outside no_grad()."
            )
        data = self.realize_cached_data()
        if data.dtype.kind != "f" and not backend_selection.integer_gradients(data.dtype):
            raise RuntimeError(
                f"backward() needs a floating-point tensor, this one has dtype {data.dtype}: "
                "gradients are defined for float tensors only (compute the loss in float32; "
                "under NEEDLE_BACKEND=np, integer tensors get integer-valued gradients as in the course)"
            )
        if out_grad is None:
            # NOTE: all ones whatever the shape, as the course's backward seeds (PyTorch raises).
            ones = data.device.xp.empty(data.shape, dtype=data.dtype)
            ones.fill(1)  # NOTE: numpy's ones() is Python around these two calls
            out_grad_data = NDArray.wrap(ones, data.device)
        else:
            out_grad_data = out_grad.realize_cached_data() if isinstance(out_grad, Value) else NDArray(
                out_grad, device=data.device, dtype=data.dtype
            )
            if out_grad_data.shape != data.shape:
                raise ValueError(f"out_grad has shape {out_grad_data.shape}, the tensor has shape {data.shape}")
        if create_graph is not False:
            grad = out_grad if isinstance(out_grad, Tensor) else Tensor.make_const(out_grad_data)
            keep_graph = create_graph is True
            autograd.run_backward(self, lambda: compute_gradient_of_variables(self, grad, keep_graph))
        else:
            autograd.run_backward(self, lambda: compute_gradient_data(self, out_grad_data, Tensor.make_const))

    # ---- operators ------------------------------------------------------------------------
    def __add__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, Tensor):
            return ops.EWiseAdd()(self, other)
        return ops.AddScalar(other)(self)

    __radd__ = __add__

    def __mul__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, Tensor):
            return ops.EWiseMul()(self, other)
        return ops.MulScalar(other)(self)

    __rmul__ = __mul__

    def __pow__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, Tensor):
            return ops.EWisePow()(self, other)
        return ops.PowerScalar(other)(self)

    def __rpow__(self, other: float) -> Tensor:
        return ops.EWisePow()(Tensor(other, device=self.device, dtype=self.dtype, requires_grad=False), self)

    def __sub__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, Tensor):
            return ops.EWiseAdd()(self, ops.Negate()(other))
        try:
            negated = -other
        except TypeError:
            negated = other  # not a number: AddScalar's error names its type
        return ops.AddScalar(negated)(self)

    def __rsub__(self, other: float) -> Tensor:
        return ops.AddScalar(other)(ops.Negate()(self))

    def __truediv__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, Tensor):
            return ops.EWiseDiv()(self, other)
        return ops.DivScalar(other)(self)

    def __rtruediv__(self, other: float) -> Tensor:
        return ops.MulScalar(other)(ops.PowerScalar(-1)(self))

    def __matmul__(self, other: Tensor) -> Tensor:
        return ops.MatMul()(self, other)

    def __neg__(self) -> Tensor:
        return ops.Negate()(self)

    def matmul(self, other: Tensor) -> Tensor:
        return ops.MatMul()(self, other)

    def sum(self, axes: int | Sequence[int] | None = None) -> Tensor:
        """Sum over ``axes`` (None: all; an int; or a tuple of ints)."""
        return ops.Summation(axes)(self)

    def broadcast_to(self, shape: int | Sequence[int]) -> Tensor:
        """Repeat along axes of size 1 (and new leading axes) to reach ``shape``."""
        return ops.BroadcastTo(shape)(self)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """The same elements in a new shape: ``t.reshape((2, 3))``, ``t.reshape(2, 3)`` or ``t.reshape(6)``.

        Example:
            >>> import needle as ndl
            >>> t = ndl.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
            >>> t.reshape(6).shape, t.reshape(3, 2).shape, t.reshape((-1,)).shape
            ((6,), (3, 2), (6,))
        """
        return ops.Reshape(_one_shape(shape, "reshape"))(self)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        """Swap two axes (the last two by default): ``t.transpose()``, ``t.transpose((0, 1))``, ``t.transpose(0, 1)``."""
        if not axes:
            return ops.Transpose(None)(self)
        return ops.Transpose(_one_shape(axes, "transpose"))(self)

    def exp(self) -> Tensor:
        return ops.Exp()(self)

    def log(self) -> Tensor:
        return ops.Log()(self)

    def relu(self) -> Tensor:
        return ops.ReLU()(self)

    def tanh(self) -> Tensor:
        return ops.Tanh()(self)

    def sigmoid(self) -> Tensor:
        return ops.Sigmoid()(self)

    # ---- PyTorch habits -------------------------------------------------------------------
    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the largest element (of the flattened tensor, or along ``axis``), as an int64
        constant: like a comparison it has no gradient. ``dim=`` is not a keyword here; pass ``axis``.

        Example:
            >>> import needle as ndl
            >>> ndl.Tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]]).argmax(axis=1)
            needle.Tensor([1 0])
        """
        return self._arg_reduction("argmax", axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the smallest element (see ``argmax``); int64, no gradient.

        Example:
            >>> import needle as ndl
            >>> ndl.Tensor([3.0, -1.0, 2.0]).argmin().item()
            1
        """
        return self._arg_reduction("argmin", axis, keepdims)

    def _arg_reduction(self, name: str, axis: int | None, keepdims: bool) -> Tensor:
        keepdims = _check_flag(keepdims, "keepdims")
        data = self.realize_cached_data()
        if axis is not None:
            if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
                raise TypeError(f"Tensor.{name} axis must be an int or None, got {_describe(axis)}")
            if not -self.ndim <= axis < max(self.ndim, 1):
                raise IndexError(
                    f"Tensor.{name} axis {axis} is out of range for a tensor of {self.ndim} dimensions "
                    f"(valid: {-self.ndim} to {self.ndim - 1})"
                )
        if data.size == 0:
            raise ValueError(f"Tensor.{name} of an empty tensor (shape {self.shape}) has no answer")
        found = getattr(data.raw, name)(axis=None if axis is None else int(axis), keepdims=keepdims)
        # NOTE: a full reduction gives a numpy scalar; asarray keeps it an array (0-d)
        return Tensor.make_const(NDArray.wrap(data.device.xp.asarray(found, dtype="int64"), data.device))

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place and return this tensor (PyTorch's habit, for leaves).

        Raises:
            TypeError: ``requires_grad`` is not True or False.
            RuntimeError: turning it off on a tensor that an op computed (use ``t.detach()``).

        Example:
            >>> import needle as ndl
            >>> w = ndl.Tensor([1.0], requires_grad=False).requires_grad_()
            >>> w.requires_grad
            True
        """
        requires_grad = _check_flag(requires_grad, "requires_grad")
        if not requires_grad and not self.is_leaf() and self.requires_grad:
            raise RuntimeError(
                "requires_grad_(False) on a tensor computed by an op: its graph would still be kept. "
                "Use t.detach() for a copy without the graph"
            )
        self.requires_grad = requires_grad
        return self


def _one_shape(arguments: tuple[Any, ...], method: str) -> Any:
    """The shape given to ``t.reshape(...)``: one tuple/list/int, or several ints (PyTorch's ``reshape(2, 3)``)."""
    if len(arguments) == 1:
        return arguments[0]
    if not arguments:
        raise TypeError(f"Tensor.{method}() needs a shape, e.g. t.{method}((2, 3)) or t.{method}(2, 3)")
    return arguments


from . import ops  # noqa: E402  (ops build on Tensor)
