"""An optimizer's update written out of place, for a weight that a pending deferred gradient reads.

The course's ``backward()`` defers the data batch's gradient, ``out_grad @ W1.T``, which must
read the first layer's weight as it was at backward (:mod:`needle.deferred`). An optimizer that
updates W1 in place has to copy it for that gradient first: one more weight-sized buffer
written every step, which at small batches costs several percent of the step
(docs/benchmarks.md). Instead, when nothing but needle can see W1's buffer, the update reads the
old values and writes the new ones into a spare buffer; the spare becomes the parameter's array
and the old buffer, unchanged, goes to the gradient. The values are those of the update in
place, bit for bit, and one weight-sized stream is saved.

It is done only where nobody could tell it from an update in place:

- exactly one pending gradient reads the weight, and the update runs on the CPU through the
  fused kernels, which can read the old values from a second buffer
  (``kernels.updates_out_of_place``);
- the parameter's NDArray is held by the parameter and that gradient only (not by a
  ``detach()``-ed tensor, an op's saved arrays or a graph recipe), so every holder sees the new
  values, as after an update in place;
- its numpy array owns its memory and only that NDArray refers to it: no view, no ``.numpy()``
  result or course ``_handle`` kept by the caller, which would still show the old values.

Otherwise the weight is copied for the gradient as before
(:func:`needle.deferred.keep_values_before_update`). The reference counts answer "who else holds
it" exactly; :data:`_OWN_REFERENCES` takes out those of the interpreter's own making.
"""
import sys

import numpy

from . import deferred, spare_copies
from .backend_ndarray import NDArray

_NUMPY_ARRAY = numpy.ndarray


_references = sys.getrefcount  # NOTE: called directly, so the calibration below counts as the checks do


def _own_references() -> int:
    probe = object()  # held by this local only
    return _references(probe)


_OWN_REFERENCES = _own_references()
"""What ``_references(x)`` counts for a local ``x`` of the calling function and the call itself."""

_OTHER_HOLDERS_OF_ARRAY = 2  # the parameter's cached_data, the gradient's recipe
# the NDArray's raw slot, the live-buffer token that counts it, the optimizer's tuple in
# `found`, and hand_over's local variable
_OTHER_HOLDERS_OF_RAW = 4


def hand_over(found) -> dict:
    """Update out of place each weight of ``found`` that one pending gradient reads, where safe.

    ``found``: the optimizer's ``[(param, weight, gradient, kernels)]`` (raw arrays); each
    weight handed over is replaced there by its new buffer, which the update is to write.
    Returns ``{id(new buffer): old buffer}``: the arrays the kernels read the old values from.
    Changes nothing when nothing is pending.
    """
    if not deferred.any_pending():
        return {}
    index_of = {}
    for index, entry in enumerate(found):  # NOTE: a loop: a comprehension is a call of its own
        index_of[id(entry[1])] = index
    sources = {}
    for raw_id, (reader, position) in deferred.sole_readers(index_of).items():
        index = index_of[raw_id]
        param, weight, gradient, kernels = found[index]
        if not kernels.updates_out_of_place:
            continue  # the update is written in place: the gradient gets a copy
        old = _swap_buffer(param, reader, position)
        if old is not None:
            new = param.cached_data.raw
            found[index] = (param, new, gradient, kernels)
            sources[id(new)] = old
    return sources


def restore_old_values(found, sources) -> None:
    """Write the old values back into each weight of ``found`` handed over in ``sources``: for a
    step that failed after :func:`hand_over` (its parameters then read as before the step)."""
    for _, weight, _, _ in found:
        source = sources.get(id(weight))
        if source is not None:
            weight[...] = source


def _swap_buffer(param, reader, position):
    """Give ``param``'s NDArray a spare buffer and ``reader`` the old one; returns the old buffer,
    or None (nothing changed) when someone else could see the swap."""
    array = param.cached_data
    if deferred.recipe_array(reader, position) is not array:
        return None  # it reads another NDArray of that buffer
    if _references(array) - _OWN_REFERENCES != _OTHER_HOLDERS_OF_ARRAY:
        return None
    old = array.raw
    if old.__class__ is not _NUMPY_ARRAY or old.base is not None or not old.flags.c_contiguous:
        return None
    if _references(old) - _OWN_REFERENCES != _OTHER_HOLDERS_OF_RAW:
        return None
    array.raw, token = spare_copies.take_held_like(array)
    param._hold_buffer(token)  # the parameter now holds the new buffer's bytes, not the old one's
    deferred.give_old_array(reader, position, NDArray.wrap(old, array.device))
    return old

