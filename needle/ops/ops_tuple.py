"""Ops whose input or output is a TensorTuple: make_tuple, tuple_get_item, split, fused_add_scalars."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..autograd import TensorOp, TensorTuple, TensorTupleOp, Value
from .. import backend_ndarray as array_api
from ..backend_ndarray import NDArray

if TYPE_CHECKING:
    from ..tensor import Tensor


class MakeTensorTuple(TensorTupleOp):
    """Bundle tensors into one TensorTuple node."""

    def compute(self, *args):
        return tuple(args)

    def gradient(self, out_grad, node):
        return tuple(out_grad[i] for i in range(len(out_grad)))


def make_tuple(*args: Tensor) -> TensorTuple:
    return MakeTensorTuple()(*args)


class TupleGetItem(TensorOp):
    """The ``index``-th tensor of a TensorTuple."""

    def __init__(self, index):
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"TupleGetItem: index must be an int, got {type(index).__name__} {index!r}")
        self.index = index

    def __call__(self, a: TensorTuple, fold_const=True) -> Value:
        # NOTE: item i of make_tuple(...) is the i-th input itself; no node is made for it.
        if fold_const and isinstance(a.op, MakeTensorTuple):
            _check_index(self.index, len(a.inputs))
            return a.inputs[self.index]
        return super().__call__(a)

    def compute(self, a):
        _check_index(self.index, len(a))
        return a[self.index]

    def gradient(self, out_grad, node):
        from ..init import zeros_like

        arrays = node.inputs[0].realize_cached_data()
        index = self.index % len(arrays)  # NOTE: item -1 is the last one, for its gradient too
        return make_tuple(*[out_grad if i == index else zeros_like(array) for i, array in enumerate(arrays)])

    def item_gradient(self, out_grad, node):
        """``(index, out_grad)``: this op's gradient for its tuple, one item only.

        ``backward`` gathers these per item and builds the tuple's gradient once
        (:func:`dense_tuple_gradient`), so a tuple of n items read by n ops costs O(n), where
        summing n dense tuples from ``gradient`` would cost O(n^2).
        """
        return self.index % len(node.inputs[0].realize_cached_data()), out_grad


def dense_tuple_gradient(source, item_grads, as_tensors: bool):
    """The gradient of the TensorTuple ``source`` from the gradients of some of its items.

    ``item_grads`` maps an item's index to the list of gradients it received (Tensors when
    ``as_tensors``, else arrays); they are summed, and an item no gradient reached gets zeros.
    Returns a TensorTuple (``as_tensors``) or a tuple of arrays.
    """
    from ..init import zeros_like

    items = []
    for index, array in enumerate(source.realize_cached_data()):
        grads = item_grads.get(index)
        if grads is None:
            items.append(zeros_like(array) if as_tensors else array_api.full(array.shape, 0, array.dtype, array.device))
            continue
        total = grads[0]
        for grad in grads[1:]:
            total = total + grad
        items.append(total)
    return make_tuple(*items) if as_tensors else tuple(items)


def _check_index(index, length):
    if not -length <= index < length:
        raise IndexError(f"TupleGetItem: index {index} is out of range for a tuple of {length} tensors")


def tuple_get_item(value: TensorTuple, index: int) -> Tensor:
    return TupleGetItem(index)(value)


class Split(TensorTupleOp):
    """Slice a tensor along ``axis`` into a TensorTuple, removing that axis (undoes ``stack``)."""

    def __init__(self, axis: int):
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise TypeError(f"Split: axis must be an int, got {type(axis).__name__} {axis!r}")
        self.axis = axis

    def compute(self, a: NDArray):
        from ._shapes import normalize_axes

        normalize_axes(self.axis, a.ndim, "Split")
        return tuple(piece.compact() for piece in array_api.split(a, self.axis))

    def gradient(self, out_grad, node):
        from .ops_shape import stack

        return stack(list(out_grad), self.axis)


def split(a: Tensor, axis: int) -> TensorTuple:
    return Split(axis)(a)


class FusedAddScalars(TensorTupleOp):
    """``(a + c0, a + c1)`` as one node: the course's example of an op with two outputs."""

    def __init__(self, c0: float, c1: float):
        from .ops_mathematic import scalar_value

        self.c0 = scalar_value(c0, "FusedAddScalars")
        self.c1 = scalar_value(c1, "FusedAddScalars")

    def compute(self, a):
        return a + self.c0, a + self.c1

    def gradient(self, out_grad, node):
        return out_grad[0] + out_grad[1]


def fused_add_scalars(x: Tensor, c0: float, c1: float) -> TensorTuple:
    return FusedAddScalars(c0, c1)(x)
