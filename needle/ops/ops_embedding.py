"""The embedding lookup: rows of a weight matrix picked by integer indices, and its adjoint."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy

from ..autograd import TensorOp, Value
from ..backend_ndarray import NDArray

if TYPE_CHECKING:
    from ..tensor import Tensor


class EmbeddingLookup(TensorOp):
    """Rows of ``weight`` (num_embeddings, dim) picked by the integer ``indices`` (any shape): ``weight[indices]``.

    Equal to the course's ``one_hot(indices) @ weight`` without the one-hot matrix; the gradient
    adds each output row's adjoint into its row of the weight.
    """

    def __init__(self, indices: NDArray):
        self.save_for_backward(indices)

    @property
    def indices(self) -> NDArray:
        """The integer indices (saved for the backward pass)."""
        return self.saved_arrays[0]

    def compute(self, weight: NDArray):
        return NDArray.wrap(weight.raw[self.indices.raw], weight.device)

    def gradient(self, out_grad, node):
        return EmbeddingGradient(self.indices, node.inputs[0].shape)(out_grad)

    def gradient_data(self, out_grad, node):
        return (_scatter_rows(out_grad, self.indices, node.inputs[0].cached_data.shape),)


class EmbeddingGradient(TensorOp):
    """EmbeddingLookup's adjoint: ``out_grad`` rows summed into a (num_embeddings, dim) array; linear, so its own gradient is the lookup."""

    def __init__(self, indices: NDArray, weight_shape):
        self.save_for_backward(indices)
        self.weight_shape = tuple(weight_shape)

    @property
    def indices(self) -> NDArray:
        """The integer indices (saved, for its own gradient)."""
        return self.saved_arrays[0]

    def compute(self, out_grad: NDArray):
        return _scatter_rows(out_grad, self.indices, self.weight_shape)

    def gradient(self, adjoint, node):
        return EmbeddingLookup(self.indices)(adjoint)


def _scatter_rows(out_grad, indices, weight_shape):
    xp = out_grad.device.xp
    grad = xp.zeros(weight_shape, dtype=out_grad.dtype)
    rows, values = indices.raw.reshape(-1), out_grad.raw.reshape(-1, weight_shape[-1])
    # NOTE: a scatter-add sums repeated indices (a word seen twice gets both adjoints); += would keep one.
    add_at = getattr(xp.add, "at", None)
    if add_at is not None:
        add_at(grad, rows, values)  # NOTE: numpy, and CuPy >= 13 (where cupyx.scatter_add is deprecated)
    else:
        import cupyx

        cupyx.scatter_add(grad, rows, values)
    return NDArray.wrap(grad, out_grad.device)


def embedding(indices: Tensor | NDArray, weight: Tensor) -> Tensor:
    """``weight[indices]``: the rows of ``weight`` for integer ``indices`` (a Tensor or NDArray), as one node.

    Example:
        >>> import needle as ndl
        >>> weight = ndl.Tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
        >>> ndl.ops.embedding(ndl.Tensor([[2], [0]], dtype="int64"), weight).numpy().tolist()
        [[[4.0, 5.0]], [[0.0, 1.0]]]
    """
    if isinstance(indices, Value):
        indices = indices.realize_cached_data()
    if not isinstance(indices, NDArray):
        raise TypeError(
            f"embedding indices must be a needle Tensor (or NDArray) of integers, got {type(indices).__name__}: "
            "wrap them with ndl.Tensor(indices, dtype='int64')"
        )
    return EmbeddingLookup(checked_indices(indices, weight.shape[0]))(weight)


def checked_indices(indices: NDArray, num_embeddings: int) -> NDArray:
    """``indices`` as integers in ``[0, num_embeddings)``, or an error naming the first bad one.

    Integer-valued floats (the course's batches hold word indices as float32) are converted;
    a fractional, NaN or infinite index is a ValueError, one out of range an IndexError.
    """
    raw = indices.raw
    xp = indices.device.xp
    if raw.dtype.kind == "b" or raw.dtype.kind not in "iuf":
        raise TypeError(f"Embedding indices must be integers (or integer-valued floats), got dtype {raw.dtype}")
    if raw.dtype.kind == "f":
        whole = xp.isfinite(raw) & (raw == xp.floor(raw))
        if not bool(whole.all()):
            position = _first(~whole)
            value = numpy.dtype(raw.dtype).type(raw[position].item())  # printed at its own precision
            raise ValueError(
                f"Embedding index {value!s} at position {position} is not a whole number: indices pick rows, "
                "so they must be integers (integer-valued floats such as 2.0 are fine); round or cast them first"
            )
    outside = (raw < 0) | (raw >= num_embeddings)
    if raw.size and bool(outside.any()):
        position = _first(outside)
        raise IndexError(
            f"Embedding has {num_embeddings} rows, got index {int(raw[position])} at position {position} "
            f"(indices from {int(raw.min())} to {int(raw.max())}): indices must lie in [0, num_embeddings)"
        )
    if raw.dtype.kind == "f":
        # NOTE: the course's batches hold word indices as floats; checked above to be exact integers in range.
        return NDArray.wrap(raw.astype("int64"), indices.device)
    return indices


def _first(mask):
    """The position (a tuple of ints) of the first True element of ``mask``."""
    flat = int(mask.reshape(-1).argmax())
    return tuple(int(axis) for axis in numpy.unravel_index(flat, mask.shape))
