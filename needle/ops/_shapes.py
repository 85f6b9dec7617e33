"""Shape helpers shared by ops: undoing broadcasting in gradients, normalising axes."""
import numbers

import numpy


def broadcast_axes(grad_shape, input_shape):
    """The axes of ``grad_shape`` along which ``input_shape`` was broadcast (to sum over)."""
    extra = len(grad_shape) - len(input_shape)
    axes = list(range(extra))
    for i, size in enumerate(input_shape):
        if size == 1 and grad_shape[i + extra] != 1:
            axes.append(i + extra)
    return tuple(axes)


def unbroadcast_data(grad, shape):
    """Sum an array gradient back to ``shape`` after numpy broadcasting."""
    if grad.shape == shape:
        return grad
    axes = broadcast_axes(grad.shape, shape)
    return grad.sum(axis=axes).reshape(shape) if axes else grad.reshape(shape)


def unbroadcast(grad, shape):
    """Sum a Tensor gradient back to ``shape`` after broadcasting, with Tensor ops."""
    if grad.shape == shape:
        return grad
    from .ops_shape import SumToShape

    return SumToShape(shape)(grad)


def normalize_axes(axes, ndim):
    """``axes`` (None, an int or a sequence) as a sorted tuple of non-negative ints, or None."""
    if axes is None:
        return None
    if isinstance(axes, numbers.Integral):
        axes = (axes,)
    normalized = []
    for axis in axes:
        if not -ndim <= axis < max(ndim, 1):
            raise ValueError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
        normalized.append(axis % ndim if ndim else 0)
    return tuple(sorted(set(normalized)))


def python_scalar(scalar, op_name):
    """A Python number from ``scalar``: numpy scalars would upcast float32 arrays to float64."""
    if isinstance(scalar, numpy.generic):
        return scalar.item()
    if isinstance(scalar, numbers.Number) and not isinstance(scalar, complex):
        return scalar
    raise TypeError(
        f"{op_name} takes a Python number, got {type(scalar).__name__}: "
        "for a tensor operand use the element-wise op (e.g. a * b with both Tensors)"
    )
