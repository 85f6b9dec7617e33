"""Indexed updates: ``array[index] -= value`` replayed as one call instead of three.

Python runs ``array[index] -= value`` as a gather, an in-place operation on the gathered copy,
and a scatter, so a capture records three steps (the gradient of softmax cross-entropy has
one: ``exp[rows, labels] -= scale``). :func:`merge_indexed_updates` puts such a triple back
into one call that does the same three numpy operations, as the eager statement does, without
the copy into the plan's buffer in between: the values are bitwise the same.
"""
import functools

import numpy

from .recorder import Step, _copy_into, _getitem, _setitem, root


def merge_indexed_updates(kept, guard_positions, used_elsewhere):
    """``kept`` (``(index, Step)`` pairs in order) with each gather, in-place ufunc, scatter triple
    made one step. ``guard_positions`` are the indices guards run before; ``used_elsewhere(key)``
    says whether a root buffer is used outside the triple (its gathered copy must not be)."""
    merged, position = [], 0
    while position < len(kept):
        triple = kept[position : position + 3]
        update = _indexed_update(triple, guard_positions, used_elsewhere) if len(triple) == 3 else None
        if update is None:
            merged.append(kept[position])
            position += 1
        else:
            merged.append((triple[0][0], update))
            position += 3
    return merged


def _indexed_update(triple, guard_positions, used_elsewhere):
    (first, gather), (_, operate), (last, scatter) = triple
    if any(first < guard <= last for guard in guard_positions):
        return None
    runs = [gather.run, operate.run, scatter.run]
    if any(run.__class__ is not functools.partial or run.keywords for run in runs):
        return None
    if runs[0].func is not _copy_into or runs[2].func is not _setitem:
        return None
    copy, getter, (base, index), options = runs[0].args
    if getter is not _getitem or options or not isinstance(copy, numpy.ndarray):
        return None
    ufunc, arguments = runs[1].func, runs[1].args
    if not isinstance(ufunc, numpy.ufunc) or ufunc.nin != 2 or ufunc.nout != 1 or len(arguments) != 3:
        return None
    if not (_same_view(arguments[0], copy) and _same_view(arguments[2], copy)):
        return None
    target, scatter_index, values = runs[2].args
    if not (_same_view(values, copy) and _same_view(target, base) and _same_index(scatter_index, index)):
        return None
    key = id(root(copy))
    if copy.base is not None or used_elsewhere(key):
        return None
    reads = (gather.reads | operate.reads | scatter.reads) - {key}
    run = functools.partial(_update_at, base, index, ufunc, arguments[1])
    return Step(run, reads, set(scatter.writes), where=scatter.where)


def _update_at(base, index, ufunc, operand):
    """``base[index] = ufunc(base[index], operand)`` the way Python runs ``base[index] -= operand``."""
    values = base[index]
    ufunc(values, operand, values)
    base[index] = values


def _same_view(a, b):
    return (
        isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and root(a) is root(b)
        and a.ctypes.data == b.ctypes.data and a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
    )


def _same_index(a, b):
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(x is y or _same_view(x, y) for x, y in zip(a, b))
    return a is b or _same_view(a, b)
