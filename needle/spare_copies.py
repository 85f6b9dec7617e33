"""Spare buffers for the weights that pending deferred gradients keep.

Before an optimizer updates a weight in place, each pending :class:`~needle.deferred.DeferredGradient`
that reads it gets a copy (see :func:`needle.deferred.keep_values_before_update`): one copy of
the first layer's weight per training step, or the weight's old buffer when the update is written
out of place (:mod:`needle.weight_handover`). Allocating a fresh buffer of that size every step
costs more than filling one (page faults on a new block), so a gradient that no longer needs
its copy (computed or freed) hands the buffer back here, and the next step's copy fills it.

One spare is kept per (shape, dtype, device); it is memory needle holds, so it is counted in
the live bytes while it waits (:mod:`needle.live_buffers`).
"""
from . import live_buffers
from .backend_ndarray import NDArray

_SPARES = {}  # (shape, dtype, device name) -> (spare NDArray, its live-buffer token)


def copy_of(array: NDArray) -> NDArray:
    """A copy of ``array`` that owns its memory, in a spare buffer when one of its kind waits."""
    spare = _take_spare(array)
    if spare is None:
        return NDArray.wrap(array.raw.copy(), array.device)
    spare.raw[...] = array.raw
    return spare


def take_held_like(array: NDArray):
    """``(raw, token)``: a buffer of ``array``'s shape, dtype and device that owns its memory, its
    values undefined (the spare of its kind when one waits), and the live-buffer token that
    counts it, now the caller's (for :mod:`needle.weight_handover`: the parameter takes both,
    so a waiting spare's bytes stay counted, with no release and hold in between)."""
    raw = array.raw
    spare = _SPARES.pop((raw.shape, raw.dtype, array.device.name), None)
    if spare is None:
        fresh = NDArray.wrap(array.device.xp.empty_like(raw), array.device)
        return fresh.raw, live_buffers.hold(fresh)
    buffer, token = spare
    return buffer.raw, token


def _take_spare(array):
    """The spare buffer of ``array``'s kind, no longer counted as waiting; None when none waits."""
    raw = array.raw
    spare = _SPARES.pop((raw.shape, raw.dtype, array.device.name), None)
    if spare is None:
        return None
    buffer, token = spare
    live_buffers.release(token)
    return buffer


def give_back(copy: NDArray) -> None:
    """Keep ``copy`` (made by :func:`copy_of`, no longer referred to) as the spare of its kind."""
    raw = copy.raw
    key = (raw.shape, raw.dtype, copy.device.name)
    if key not in _SPARES:
        _SPARES[key] = (copy, live_buffers.hold(copy))


def clear() -> None:
    """Drop every spare (their memory goes back to the allocator)."""
    for _, token in _SPARES.values():
        live_buffers.release(token)
    _SPARES.clear()
