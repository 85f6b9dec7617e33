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


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, numpy.bool_))


def as_shape(shape, op_name, allow_inferred=False):
    """``shape`` (an int or a sequence of ints) as a tuple of ints, or a TypeError/ValueError naming it.

    ``allow_inferred`` lets one entry be -1 (reshape's "whatever size is left").
    """
    if _is_int(shape):
        shape = (shape,)
    elif isinstance(shape, (tuple, list, range)) or (isinstance(shape, numpy.ndarray) and shape.ndim == 1):
        shape = tuple(shape)
    else:
        raise TypeError(
            f"{op_name}: shape must be an int or a tuple of ints, got {type(shape).__name__} {shape!r}: "
            "e.g. (2, 3)"
        )
    for size in shape:
        if not _is_int(size):
            raise TypeError(
                f"{op_name}: shape {shape!r} holds {type(size).__name__} {size!r}; every size must be an int"
            )
    shape = tuple(int(size) for size in shape)
    inferred = shape.count(-1) if allow_inferred else 0
    if inferred > 1:
        raise ValueError(f"{op_name}: shape {shape} has more than one -1; only one size can be inferred")
    if any(size < 0 and not (allow_inferred and size == -1) for size in shape):
        allowed = "non-negative (one may be -1)" if allow_inferred else "non-negative"
        raise ValueError(f"{op_name}: shape {shape} has a negative size; sizes must be {allowed}")
    return shape


def as_axes(axes, op_name):
    """``axes`` (None, an int, or a sequence of ints) checked for type: None, an int or a tuple."""
    if axes is None or _is_int(axes):
        return axes if axes is None else int(axes)
    if isinstance(axes, (tuple, list, range)):
        axes = tuple(axes)
        if all(_is_int(axis) for axis in axes):
            return tuple(int(axis) for axis in axes)
    raise TypeError(
        f"{op_name}: axes must be None, an int or a tuple of ints, got {type(axes).__name__} {axes!r}: "
        "e.g. axes=1 or axes=(0, 1)"
    )


class AxisError(ValueError, IndexError):
    """An axis out of range or given twice: a ValueError (as numpy's) and an IndexError (as PyTorch's)."""


def normalize_axes(axes, ndim, op_name="axes"):
    """``axes`` (None, an int or a sequence) as a sorted tuple of non-negative ints, or None.

    Raises AxisError (a ValueError and an IndexError), naming ``op_name``, for an axis out of
    range or given twice.
    """
    if axes is None:
        return None
    if isinstance(axes, numbers.Integral):
        axes = (axes,)
    normalized = []
    for axis in axes:
        if not -ndim <= axis < max(ndim, 1):
            valid = f"-{ndim} to {ndim - 1}" if ndim else "0"
            raise AxisError(
                f"{op_name}: axis {axis} is out of range for a tensor with {ndim} dimensions (valid: {valid})"
            )
        normalized.append(axis % ndim if ndim else 0)
    if len(set(normalized)) != len(normalized):
        raise AxisError(f"{op_name}: axes {tuple(axes)} name the same axis more than once; give each axis once")
    return tuple(sorted(normalized))


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
