"""Flat buffers: a captured step's parameters, their gradients and the optimizer's state, one array each.

The hand-written floor updates all its parameters in one pass: its weights, gradients and
velocities each live in one flat array. A replay does the same where it can. Before a capture,
:func:`flatten_parameters` moves each optimizer's parameters of one dtype into one flat buffer
(each parameter's array becomes a view of it, with its values). After the capture,
:func:`flatten_gradients` moves the plan's gradient buffers of those parameters into a second
flat buffer with the same layout, rewriting the recorded steps that write or read them. The
optimizer's replay (:mod:`needle.compiler.optimizer_replay`) then moves its state (SGD's
velocities, Adam's moments) into flat buffers of that layout too, and calls the update routine
once over the three flat arrays instead of once per parameter. The arithmetic is elementwise,
so the values are bitwise those of the per-parameter update.

Where a precondition does not hold (a parameter that is a view of another array, a gradient
that the step's result or a guard also uses, a step that is not a plain array call), nothing is
moved and the replay updates parameter by parameter, as before.
"""
import functools

import numpy

from ..backend_ndarray import NDArray
from .recorder import root


def flatten_parameters(optimizers) -> None:
    """Give each optimizer's parameters of one dtype one flat buffer (values kept; each array a view of it).

    Example:
        >>> import needle as ndl
        >>> model = ndl.nn.Linear(3, 2)
        >>> opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        >>> before = model.weight.numpy().copy()
        >>> flatten_parameters([opt])
        >>> flat = flat_root([p.cached_data.raw for p in opt.params])
        >>> flat.shape, bool((model.weight.numpy() == before).all())
        ((8,), True)
    """
    for opt in optimizers:
        for datas, params in _parameter_groups(opt).values():
            if len(datas) < 2 or flat_root([d.raw for d in datas]) is not None:
                continue
            if any(d.raw.base is not None for d in datas):
                continue  # a view of another array: moving it would break that aliasing
            flat = numpy.empty(sum(d.raw.size for d in datas), datas[0].raw.dtype)
            for param, data, view in zip(params, datas, _views(flat, [d.raw.shape for d in datas])):
                view[...] = data.raw
                param._set_cached_data(NDArray.wrap(view, data.device))


def flat_root(arrays):
    """The flat buffer that ``arrays`` tile exactly (C-contiguous views of it, each element once), or None."""
    if not arrays:
        return None
    if arrays[0].__class__ is not numpy.ndarray:
        return None  # a CuPy array: CUDA replays update per parameter
    buffer = root(arrays[0])
    if buffer.__class__ is not numpy.ndarray or buffer.ndim != 1 or not buffer.flags.c_contiguous:
        return None
    start, itemsize, taken = buffer.ctypes.data, buffer.itemsize, []
    for array in arrays:
        if root(array) is not buffer or not array.flags.c_contiguous or array.dtype != buffer.dtype:
            return None
        taken.append(((array.ctypes.data - start) // itemsize, array.size))
    taken.sort()
    position = 0
    for offset, size in taken:
        if offset != position:
            return None
        position += size
    return buffer if position == buffer.size else None


def offsets_in(buffer, arrays):
    """Each array's element offset in ``buffer`` (they are views of it)."""
    start, itemsize = buffer.ctypes.data, buffer.itemsize
    return [(array.ctypes.data - start) // itemsize for array in arrays]


def flat_like(buffer, arrays, offsets):
    """A new flat buffer like ``buffer`` holding each of ``arrays`` at its offset; returns it and the views."""
    flat = numpy.empty_like(buffer)
    views = []
    for array, offset in zip(arrays, offsets):
        view = flat[offset : offset + array.size].reshape(array.shape)
        view[...] = array
        views.append(view)
    return flat, views


def flatten_gradients(recorder, optimizers, protected):
    """Move the plan's gradient buffers of each flat parameter group into one flat buffer.

    ``protected`` holds ids of root buffers that something else the capture keeps refers to (the
    step's result, module state): a gradient among them is left where it is. Rewrites
    ``recorder.steps`` in place; returns how many gradients moved.
    """
    moved = 0
    guarded = {id(root(guard.array)) for _, guard in recorder.guards}
    for opt in optimizers:
        for datas, params in _parameter_groups(opt).values():
            weights = flat_root([d.raw for d in datas])
            if weights is None:
                continue
            grads = [param.grad for param in params]
            buffers = _fresh_gradient_buffers(grads, datas, recorder, protected | guarded)
            if buffers is None:
                continue
            offsets = offsets_in(weights, [d.raw for d in datas])
            flat, _ = flat_like(weights, buffers, offsets)
            replacements = {
                id(buffer): (flat, offset * flat.itemsize) for buffer, offset in zip(buffers, offsets)
            }
            if not _rebase_steps(recorder, replacements, flat):
                continue
            for grad in grads:
                data = grad.cached_data
                grad._set_cached_data(NDArray.wrap(_rebased(data.raw, replacements), data.device))
            recorder.produced[id(flat)] = flat
            moved += len(buffers)
    return moved


def _parameter_groups(opt):
    """``{dtype: ([NDArray], [param])}``: the optimizer's distinct numpy parameters, by dtype."""
    groups, seen = {}, set()
    for param in opt.params:
        if id(param) in seen:
            continue
        seen.add(id(param))
        data = param.cached_data
        if data is None or data.__class__ is not NDArray or data.raw.__class__ is not numpy.ndarray:
            continue
        if not data.raw.flags.c_contiguous:
            continue
        datas, params = groups.setdefault(data.raw.dtype, ([], []))
        datas.append(data)
        params.append(param)
    return groups


def _fresh_gradient_buffers(grads, datas, recorder, protected):
    """The plan-made buffers that the gradients are, one each, or None if any is not one."""
    buffers, seen = [], set()
    for grad, data in zip(grads, datas):
        if grad is None or grad.cached_data is None or grad.cached_data.__class__ is not NDArray:
            return None
        raw = grad.cached_data.raw
        if raw.__class__ is not numpy.ndarray:
            return None
        buffer = root(raw)
        if (
            id(buffer) not in recorder.produced or id(buffer) in seen or id(buffer) in protected
            or buffer.size != data.raw.size or buffer.dtype != data.raw.dtype or not buffer.flags.c_contiguous
            or raw.shape != data.raw.shape or not raw.flags.c_contiguous or raw.ctypes.data != buffer.ctypes.data
            or buffer.base is not None
        ):
            return None
        seen.add(id(buffer))
        buffers.append(buffer)
    return buffers


def _rebase_steps(recorder, replacements, flat):
    """Point every recorded step that uses a replaced buffer at its new view; False (nothing changed) if one cannot be.

    A step is a plain array call (a ``functools.partial``) whose arrays are rebased, or an
    optimizer's host step, which looks its arrays up again at its first replay.
    """
    from .optimizer_replay import ReplayedStep

    keys = set(replacements)
    rewritten = []
    for index, step in enumerate(recorder.steps):
        if not (step.reads & keys or step.writes & keys):
            continue
        run = step.run
        if run.__class__ is ReplayedStep and not step.writes & keys:
            rewritten.append((index, run))
        elif run.__class__ is functools.partial:
            args = _rebased(run.args, replacements)
            keywords = _rebased(run.keywords, replacements)
            rewritten.append((index, functools.partial(run.func, *args, **keywords)))
        else:
            return False
    flat_id = id(flat)
    for index, run in rewritten:
        step = recorder.steps[index]
        step.run = run
        step.reads = {flat_id if key in keys else key for key in step.reads}
        step.writes = {flat_id if key in keys else key for key in step.writes}
    return True


def _rebased(value, replacements):
    """``value`` with each array that is a view of a replaced buffer made the same view of its
    replacement (``replacements``: id of the old buffer -> (flat buffer, byte offset there))."""
    if isinstance(value, numpy.ndarray):
        buffer = root(value)
        target = replacements.get(id(buffer))
        if target is None:
            return value
        flat, start = target
        offset = start + value.ctypes.data - buffer.ctypes.data
        return numpy.ndarray(value.shape, value.dtype, buffer=flat, offset=offset, strides=value.strides)
    if type(value) is tuple or type(value) is list:
        return type(value)(_rebased(item, replacements) for item in value)
    if type(value) is dict:
        return {key: _rebased(item, replacements) for key, item in value.items()}
    return value


def _views(flat, shapes):
    offset = 0
    for shape in shapes:
        size = int(numpy.prod(shape, dtype=numpy.int64))
        yield flat[offset : offset + size].reshape(shape)
        offset += size


def same_layout(weights, gradients):
    """``(weight buffer, gradient buffer, offsets)`` when both lists tile flat buffers alike, else None."""
    weight_buffer, gradient_buffer = flat_root(weights), flat_root(gradients)
    if weight_buffer is None or gradient_buffer is None or weight_buffer.dtype != gradient_buffer.dtype:
        return None
    offsets = offsets_in(weight_buffer, weights)
    if offsets != offsets_in(gradient_buffer, gradients):
        return None
    return weight_buffer, gradient_buffer, offsets


def flat_state(weight_buffer, offsets, arrays):
    """A flat buffer with ``arrays`` (per-parameter optimizer state) laid out as the weights are,
    and the views to store back; the existing buffer when they already are. None when one of
    them is not a numpy array of its weight's dtype and shape."""
    for array, offset in zip(arrays, offsets):
        if array.__class__ is not numpy.ndarray or array.dtype != weight_buffer.dtype:
            return None
    buffer = flat_root(arrays)
    if buffer is not None and buffer.shape == weight_buffer.shape and offsets_in(buffer, arrays) == offsets:
        return buffer, list(arrays)
    return flat_like(weight_buffer, arrays, offsets)
