"""Gradient clipping by total norm."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy

from ..autograd import Tensor
from ..backend_ndarray import NDArray


def clip_grad_norm(params: Iterable[Tensor] | Tensor, max_norm: float) -> float:
    """Scale the gradients so that their joint 2-norm is at most ``max_norm``.

    Parameters without a gradient are ignored. The norm is accumulated in at least float32 (a
    float16 gradient's squares would overflow). The scaled gradients are written as new arrays
    into each ``.grad``: after ``backward(create_graph=False)`` two leaves may share one
    gradient array (``a + b`` passes the same array to both), which in-place scaling would
    scale twice.

    Args:
        params: parameters (e.g. ``model.parameters()``), or one parameter.
        max_norm: the largest allowed total norm (> 0).

    Inside a step compiled with ``ndl.compile`` (on the CPU) the gradients are scaled by an
    array, 1 where the norm is at most ``max_norm``, so every replay clips by its own norm; the
    norm returned is the capturing call's, as any Python value in a compiled step is.

    Returns:
        the total norm before clipping, as a float.

    Example:
        >>> import needle as ndl
        >>> w = ndl.nn.Parameter(ndl.Tensor([0.0, 0.0]))
        >>> w.grad = ndl.Tensor([3.0, 4.0])
        >>> ndl.optim.clip_grad_norm([w], 1.0)
        5.0
        >>> [round(g, 3) for g in w.grad.numpy().tolist()]
        [0.6, 0.8]
    """
    max_norm = float(max_norm)
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got max_norm={max_norm}")
    if isinstance(params, Tensor):
        params = [params]
    elif callable(getattr(params, "parameters", None)):
        raise TypeError(
            f"clip_grad_norm takes the parameters, got the module {type(params).__name__}; pass model.parameters()"
        )
    from ..compiler.traced_array import TracedArray  # NOTE: here: needle.compiler imports the optimizers

    params = [p for p in params if p.grad is not None]
    squares_by_device, captured = {}, False
    for param in params:
        data = param.grad.realize_cached_data()
        captured = captured or isinstance(data.raw, TracedArray)  # ndl.compile is capturing this call
        flat = data.raw.reshape(-1)
        if flat.dtype.itemsize < 4 or flat.dtype.kind != "f":
            # NOTE: float16 squares overflow at 256 (300**2 is inf); sum them in float32.
            flat = flat.astype("float32")
        squares_by_device.setdefault(data.device, []).append(data.device.xp.vdot(flat, flat))
    if captured:
        (squares,) = squares_by_device.values()  # a capture is on the CPU: one device
        return _clip_as_arrays(params, max_norm, sum(squares))
    total = math.sqrt(sum(float(sum(squares)) for squares in squares_by_device.values()))
    if total > max_norm:
        scale = max_norm / (total + 1e-6)
        for param in params:
            data = param.grad.realize_cached_data()
            param.grad = Tensor.make_const(NDArray.wrap(data.raw * scale, data.device))
    return total


def _clip_as_arrays(params, max_norm, squares):
    """The clipping above without a Python branch on the norm, for a capture: a replay runs only
    array operations, so the scale is an array (1 where the norm is small, which leaves every
    value as it is) and each step of a replay clips by its own norm. The values are the eager
    path's: the same float32 sum, the square root and the scale in float64, cast to the
    gradient's dtype for the product. Returns the norm of the capture's own call (nothing a
    replay reads)."""
    squares = numpy.asanyarray(squares)  # NOTE: asanyarray: asarray would drop the trace, freezing the scale
    total = numpy.sqrt(squares.astype(numpy.float64))
    scale = numpy.where(total > max_norm, max_norm / (total + 1e-6), 1.0)
    for param in params:
        data = param.grad.realize_cached_data()
        param.grad = Tensor.make_const(NDArray.wrap(data.raw * scale.astype(data.raw.dtype), data.device))
    return float(total.view(numpy.ndarray))  # NOTE: a plain view: the value goes to Python only, no guard
