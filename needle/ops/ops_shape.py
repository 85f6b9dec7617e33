"""Shape, reduction and matrix ops: reshape, broadcast, transpose, sum, matmul, stack, flip, dilate."""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Sequence

from ..autograd import TensorOp
from .. import backend_ndarray as array_api
from ..backend_ndarray import NDArray
from ..deferred import deferred_array_product, deferred_product, is_deferrable
from ._shapes import as_axes, as_shape, normalize_axes, unbroadcast, unbroadcast_data

if TYPE_CHECKING:
    from ..tensor import Tensor


class Transpose(TensorOp):
    """Swap two axes (the last two by default), as the course's ``transpose``."""

    def __init__(self, axes=None):
        if axes is not None:
            checked = as_axes(axes, "Transpose")
            if not isinstance(checked, tuple) or len(checked) != 2:
                raise ValueError(
                    f"Transpose swaps two axes; got axes={axes!r}: give two, e.g. axes=(0, 1)"
                )
            if checked[0] == checked[1]:
                raise ValueError(
                    f"Transpose: axes {checked} name the same axis twice; give two different axes, e.g. (0, 1)"
                )
            axes = checked
        self.axes = axes

    def _permutation(self, ndim):
        if ndim < 2:
            raise ValueError(f"Transpose needs at least 2 dimensions, got a tensor with {ndim}")
        if self.axes is None:
            first, second = ndim - 2, ndim - 1
        else:
            # NOTE: normalize_axes sorts, which is harmless here: a swap is symmetric.
            first, second = normalize_axes(self.axes, ndim, "Transpose")
        order = list(range(ndim))
        order[first], order[second] = order[second], order[first]
        return tuple(order)

    def compute(self, a: NDArray):
        return a.permute(self._permutation(a.ndim))

    def gradient(self, out_grad, node):
        return transpose(out_grad, self.axes)

    def gradient_data(self, out_grad, node):
        return (out_grad.permute(self._permutation(out_grad.ndim)),)


def transpose(a: Tensor, axes: tuple[int, int] | None = None) -> Tensor:
    return Transpose(axes)(a)


class Reshape(TensorOp):
    """The same elements in a new shape (one dimension may be -1); ``shape`` may be an int."""

    def __init__(self, shape):
        self.shape = as_shape(shape, "Reshape", allow_inferred=True)

    def compute(self, a: NDArray):
        try:
            return a.reshape(self.shape)
        except ValueError as error:
            raise ValueError(f"Reshape: cannot reshape {a.shape} ({a.size} elements) into {self.shape}") from error

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)

    def gradient_data(self, out_grad, node):
        return (out_grad.reshape(node.inputs[0].cached_data.shape),)


def reshape(a: Tensor, shape: int | Sequence[int]) -> Tensor:
    return Reshape(shape)(a)


class BroadcastTo(TensorOp):
    """Repeat along axes of size 1 (and new leading axes) to reach ``shape``."""

    def __init__(self, shape):
        self.shape = as_shape(shape, "BroadcastTo")

    def compute(self, a: NDArray):
        try:
            return a.broadcast_to(self.shape)
        except ValueError as error:
            raise ValueError(
                f"BroadcastTo: cannot broadcast shape {a.shape} to {self.shape}: "
                "only axes of size 1 (or missing leading axes) can grow"
            ) from error

    def gradient(self, out_grad, node):
        return unbroadcast(out_grad, node.inputs[0].shape)

    def gradient_data(self, out_grad, node):
        return (unbroadcast_data(out_grad, node.inputs[0].cached_data.shape),)


def broadcast_to(a: Tensor, shape: int | Sequence[int]) -> Tensor:
    return BroadcastTo(shape)(a)


class SumToShape(TensorOp):
    """Sum ``a`` back to ``shape`` after numpy broadcasting: BroadcastTo's adjoint, as one node."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a: NDArray):
        return unbroadcast_data(a, self.shape)

    def gradient(self, out_grad, node):
        return broadcast_to(out_grad, node.inputs[0].shape)

    def gradient_data(self, out_grad, node):
        return (out_grad.broadcast_to(node.inputs[0].cached_data.shape),)


def sum_to_shape(a: Tensor, shape: Sequence[int]) -> Tensor:
    return SumToShape(shape)(a)


class Summation(TensorOp):
    """Sum over ``axes`` (None: all; an int; or a tuple), dropping the summed axes."""

    def __init__(self, axes=None):
        self.axes = as_axes(axes, "Summation")

    def compute(self, a: NDArray):
        return a.sum(axis=normalize_axes(self.axes, a.ndim, "Summation"))

    def _kept_shape(self, input_shape):
        axes = normalize_axes(self.axes, len(input_shape), "Summation")
        if axes is None:
            return (1,) * len(input_shape)
        return tuple(1 if i in axes else size for i, size in enumerate(input_shape))

    def gradient(self, out_grad, node):
        # NOTE: the gradient first gets the summed axes back as size 1, then broadcasts.
        input_shape = node.inputs[0].shape
        return broadcast_to(reshape(out_grad, self._kept_shape(input_shape)), input_shape)

    def gradient_data(self, out_grad, node):
        input_shape = node.inputs[0].cached_data.shape
        return (out_grad.reshape(self._kept_shape(input_shape)).broadcast_to(input_shape),)


def summation(a: Tensor, axes: int | Sequence[int] | None = None) -> Tensor:
    return Summation(axes)(a)


class MatMul(TensorOp):
    """Matrix product ``a @ b``, batched over leading axes with numpy broadcasting.

    ``transpose_a`` / ``transpose_b`` swap the last two axes of that operand first, inside the
    same node: gradients use them, so a product's gradient costs no transpose nodes.
    """

    def __init__(self, transpose_a=False, transpose_b=False):
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b

    def compute(self, a: NDArray, b: NDArray):
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError(
                f"MatMul needs operands with at least 2 dimensions, got shapes {a.shape} and {b.shape}: "
                "reshape a vector to (1, n) or (n, 1)"
            )
        if self.transpose_a:
            a = _swap_last_two(a)
        if self.transpose_b:
            b = _swap_last_two(b)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"MatMul: shapes {a.shape} @ {b.shape} do not fit: "
                f"the last axis of the first ({a.shape[-1]}) must equal the second-last of the second ({b.shape[-2]})"
            )
        try:
            return a @ b
        except ValueError as error:
            raise ValueError(
                f"MatMul: shapes {a.shape} @ {b.shape} do not fit: the batch axes {a.shape[:-2]} and "
                f"{b.shape[:-2]} must be equal or broadcastable (size 1 or missing)"
            ) from error

    def _adjoint_products(self):
        """For each operand, the flagged product giving its adjoint and which of (a, b, out_grad) it multiplies.

        With C = A' @ B' (A' = A or A^T, B' likewise), dA' = G B'^T and dB' = A'^T G; a
        transposed operand takes the transpose of its adjoint, written as a flagged product.
        """
        transpose_a, transpose_b = self.transpose_a, self.transpose_b
        if transpose_a:
            for_a = MatMul(transpose_b, True), (1, 2)
        else:
            for_a = MatMul(False, not transpose_b), (2, 1)
        if transpose_b:
            for_b = MatMul(True, transpose_a), (2, 0)
        else:
            for_b = MatMul(not transpose_a, False), (0, 2)
        return for_a, for_b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        values = (a, b, out_grad)
        grads = []
        for operand, (product, (first, second)) in zip((a, b), self._adjoint_products()):
            # NOTE: a constant operand (a data batch) gets its .grad deferred: computed when read.
            if is_deferrable(operand):
                grads.append(deferred_product(product, values[first], values[second], operand.shape))
            else:
                grads.append(unbroadcast(product(values[first], values[second]), operand.shape))
        return tuple(grads)

    def constant_input_gradients(self, out_grad, node):
        a, b = node.inputs
        if not (is_deferrable(a) or is_deferrable(b)):
            return super().constant_input_gradients(out_grad, node)
        arrays = (a.cached_data, b.cached_data, out_grad)
        grads = []
        for operand, (product, (first, second)) in zip((a, b), self._adjoint_products()):
            deferrable = is_deferrable(operand)
            grads.append(
                deferred_array_product(product, arrays[first], arrays[second], operand.shape) if deferrable else None
            )
        return tuple(grads)

    def gradient_data(self, out_grad, node):
        a, b = node.inputs
        a_data, b_data = a.cached_data, b.cached_data
        grad_a = grad_b = None
        if a.requires_grad:
            b_used = _swap_last_two(b_data) if self.transpose_b else b_data
            grad = out_grad @ _swap_last_two(b_used)
            grad_a = unbroadcast_data(_swap_last_two(grad) if self.transpose_a else grad, a_data.shape)
        if b.requires_grad:
            a_used = _swap_last_two(a_data) if self.transpose_a else a_data
            grad = _swap_last_two(a_used) @ out_grad
            grad_b = unbroadcast_data(_swap_last_two(grad) if self.transpose_b else grad, b_data.shape)
        return grad_a, grad_b


def _swap_last_two(array):
    order = list(range(array.ndim))
    order[-1], order[-2] = order[-2], order[-1]
    return array.permute(tuple(order))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return MatMul()(a, b)


class Stack(TensorOp):
    """Join equally shaped tensors along a new axis; takes a TensorTuple (or list via ``stack``)."""

    def __init__(self, axis: int):
        self.axis = _one_axis(axis, "Stack")

    def compute(self, args):
        if not args:
            raise ValueError("Stack needs at least one tensor, got none")
        shapes = {a.shape for a in args}
        if len(shapes) != 1:
            raise ValueError(f"Stack needs tensors of one shape, got shapes {sorted(shapes)}")
        normalize_axes(self.axis, args[0].ndim + 1, "Stack")  # the new axis may also go last
        return array_api.stack(list(args), axis=self.axis)

    def gradient(self, out_grad, node):
        from .ops_tuple import split

        return split(out_grad, self.axis)


def stack(args: list[Tensor] | tuple[Tensor, ...], axis: int) -> Tensor:
    from .ops_tuple import make_tuple

    if not isinstance(args, (list, tuple)):
        raise TypeError(f"stack takes a list of Tensors, got {type(args).__name__}: e.g. stack([a, b], axis=0)")
    return Stack(axis)(make_tuple(*args))


def _one_axis(axis, op_name):
    """``axis`` as an int, or a TypeError naming ``op_name``."""
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{op_name}: axis must be an int, got {type(axis).__name__} {axis!r}")
    return int(axis)


def _axis_tuple(axes, op_name):
    """``axes`` (an int or a sequence of ints) as a tuple of ints, or a TypeError naming ``op_name``."""
    checked = as_axes(axes, op_name)
    if checked is None:
        raise TypeError(f"{op_name}: axes must be an int or a tuple of ints, got None")
    return (checked,) if isinstance(checked, int) else checked


def _dilation(dilation, op_name):
    if not isinstance(dilation, int) or isinstance(dilation, bool):
        raise TypeError(f"{op_name}: dilation must be an int, got {type(dilation).__name__} {dilation!r}")
    if dilation < 0:
        raise ValueError(
            f"{op_name}: dilation must be a non-negative int (zeros inserted after each element), "
            f"got {type(dilation).__name__} {dilation!r}"
        )
    return dilation


def _check_dilation_axes(axes, ndim, op_name):
    for axis in axes:
        if axis < -ndim:
            raise ValueError(f"{op_name}: axis {axis} is out of range for a tensor with {ndim} dimensions")


class Flip(TensorOp):
    """Reverse the order of elements along ``axes`` (None: all; an int; or a tuple)."""

    def __init__(self, axes=None):
        self.axes = None if axes is None else _axis_tuple(axes, "Flip")

    def compute(self, a: NDArray):
        axes = normalize_axes(self.axes, a.ndim, "Flip") if self.axes is not None else tuple(range(a.ndim))
        return a.flip(axes).compact()

    def gradient(self, out_grad, node):
        return flip(out_grad, self.axes)


def flip(a: Tensor, axes: int | Sequence[int] | None) -> Tensor:
    return Flip(axes)(a)


class Dilate(TensorOp):
    """Insert ``dilation`` zeros after each element along ``axes``."""

    def __init__(self, axes: int | Sequence[int], dilation: int):
        self.axes = _axis_tuple(axes, "Dilate")
        self.dilation = _dilation(dilation, "Dilate")

    def compute(self, a: NDArray):
        _check_dilation_axes(self.axes, a.ndim, "Dilate")
        step = self.dilation + 1
        shape = list(a.shape)
        index = [slice(None)] * a.ndim
        for axis in self.axes:
            if axis >= a.ndim:
                continue  # NOTE: the course ignores axes the tensor does not have
            shape[axis] *= step
            index[axis] = slice(None, None, step)
        out = array_api.zeros(tuple(shape), dtype=a.dtype, device=a.device)
        out[tuple(index)] = a
        return out

    def gradient(self, out_grad, node):
        return undilate(out_grad, self.axes, self.dilation)


def dilate(a: Tensor, axes: int | Sequence[int], dilation: int) -> Tensor:
    return Dilate(axes, dilation)(a)


class UnDilate(TensorOp):
    """Keep every ``dilation + 1``-th element along ``axes`` (undoes ``dilate``)."""

    def __init__(self, axes: int | Sequence[int], dilation: int):
        self.axes = _axis_tuple(axes, "UnDilate")
        self.dilation = _dilation(dilation, "UnDilate")

    def compute(self, a: NDArray):
        _check_dilation_axes(self.axes, a.ndim, "UnDilate")
        index = [slice(None)] * a.ndim
        for axis in self.axes:
            if axis < a.ndim:
                index[axis] = slice(None, None, self.dilation + 1)
        return a[tuple(index)].compact()

    def gradient(self, out_grad, node):
        return dilate(out_grad, self.axes, self.dilation)


def undilate(a: Tensor, axes: int | Sequence[int], dilation: int) -> Tensor:
    return UnDilate(axes, dilation)(a)



class Pad(TensorOp):
    """Add zeros around ``a``: ``axes`` holds one ``(before, after)`` pair per dimension.

    A negative width removes that many elements instead, as PyTorch's ``F.pad`` does, so the
    gradient of a pad is the pad with every width negated (and gradients of gradients work).

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([[1.0, 2.0, 3.0]])
        >>> ndl.ops.pad(x, ((1, 0), (0, 1))).numpy().tolist()
        [[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 0.0]]
        >>> ndl.ops.pad(x, ((0, 0), (-1, 0))).numpy().tolist()
        [[2.0, 3.0]]
    """

    def __init__(self, axes):
        self.axes = tuple((int(before), int(after)) for before, after in axes)

    def compute(self, a: NDArray):
        if len(self.axes) != a.ndim:
            raise ValueError(
                f"Pad needs one (before, after) pair per dimension: got {len(self.axes)} pairs "
                f"{self.axes} for a tensor of shape {a.shape}"
            )
        crop = []
        for size, (before, after) in zip(a.shape, self.axes):
            start, stop = max(-before, 0), size - max(-after, 0)
            if stop < start:
                raise ValueError(f"Pad: widths {self.axes} remove more than the {size} elements of shape {a.shape}")
            crop.append(slice(start, stop))
        kept = a[tuple(crop)] if any(before < 0 or after < 0 for before, after in self.axes) else a
        grow = tuple((max(before, 0), max(after, 0)) for before, after in self.axes)
        return kept.pad(grow) if any(before or after for before, after in grow) else kept.compact()

    def gradient(self, out_grad, node):
        return pad(out_grad, tuple((-before, -after) for before, after in self.axes))


def pad(a: Tensor, axes: Sequence[tuple[int, int]]) -> Tensor:
    return Pad(axes)(a)
