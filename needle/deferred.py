"""Deferred gradients: the course ``backward()``'s gradient of a constant, computed when first read.

The course's ``loss.backward()`` gives every node its ``.grad``, constants included: the data
batch entering the first layer gets ``out_grad @ W1^T``, a product as large as the layer's
weight gradient, that almost no training loop reads. A :class:`DeferredGradient` is that
``.grad``: a leaf Tensor (no op, no inputs, ``requires_grad=False``) that holds only the arrays
its value is made from and computes it the first time its data is needed (``.numpy()``,
printing, an op, ``.detach()``...). A gradient nobody reads costs nothing but the references.

It gives the value at ``backward()`` time, as PyTorch and the course do, also after an
optimizer has updated the weights: SGD and Adam on the CPU write the update of a weight that a
pending gradient reads out of place and give the gradient the old buffer
(:mod:`needle.weight_handover`); otherwise, before an optimizer writes into a parameter's
array, :func:`keep_values_before_update` gives each pending gradient that uses that array a
copy of it (one copy per step, far cheaper than the product). Code that writes into a tensor's
array by itself (``t.cached_data.raw[...] = ...``) should read pending gradients first.

Holds no graph node: what it keeps alive is its arrays, so a batch that outlives its step keeps
no graph through its ``.grad``.
"""
from __future__ import annotations

import weakref

import numpy

from . import autograd, live_buffers, spare_copies
from .backend_ndarray import NDArray
from .tensor import Tensor

# id -> weak reference of each deferred gradient that still reads arrays an optimizer may change
# (a plain dict: weakref.WeakSet is written in Python, and this is touched every training step)
_PENDING: "dict[int, weakref.ref]" = {}
_REALIZED = 0  # deferred gradients computed so far (for tests and benchmarks)


def realized_count() -> int:
    """How many deferred gradients have been computed since import.

    Example:
        >>> import needle as ndl
        >>> batch = ndl.Tensor([[1.0, 2.0]], requires_grad=False)
        >>> w = ndl.Tensor([[1.0], [1.0]])
        >>> (batch @ w).sum().backward()
        >>> before = ndl.deferred.realized_count()
        >>> batch.grad.numpy().tolist(), ndl.deferred.realized_count() - before
        ([[1.0, 1.0]], 1)
    """
    return _REALIZED


class DeferredGradient(Tensor):
    """A constant's ``.grad`` whose array is computed from ``function(*arrays)`` when first needed."""

    __slots__ = ("_recipe", "_known_shape", "_known_dtype", "_recipe_buffers", "_copies")
    # NOTE: the arrays of the recipe are held in the live-bytes counters (``_recipe_buffers``)
    # until the value is computed or the gradient is freed: they are memory this gradient keeps.

    @classmethod
    def of(cls, function, arrays, shape, dtype, extra=()) -> "DeferredGradient":
        """The deferred value ``function(*arrays, *extra)``, which will have ``shape`` and ``dtype``.

        ``arrays`` are the NDArrays it is made from (copied, or handed over, if an optimizer is
        about to change them), ``extra`` any other arguments (no Values: a graph node kept here
        would stay alive).
        """
        value = cls.__new__(cls)
        autograd._fill(value, None, (), None, False)
        arrays = tuple(arrays)
        value._recipe = (function, arrays, tuple(extra))
        value._known_shape = tuple(shape)
        value._known_dtype = numpy.dtype(dtype)
        # NOTE: a tuple of tokens, as live_buffers.hold_all makes for a tuple of NDArrays
        value._recipe_buffers = tuple(map(live_buffers.hold, arrays))
        value._copies = ()  # the weight buffers it owns (spare_copies'), handed back when done
        _PENDING[id(value)] = weakref.ref(value)
        return value

    def realize_cached_data(self):
        data = self.cached_data
        if data is None:
            global _REALIZED
            function, arrays, extra = self._recipe
            data = function(*arrays, *extra)
            self._recipe = None  # the arrays are no longer needed
            _PENDING.pop(id(self), None)
            self._set_cached_data(data)
            self._release_recipe_buffers()
            _REALIZED += 1
        return data

    @property
    def shape(self):
        return self._known_shape if self.cached_data is None else self.cached_data.shape

    @property
    def dtype(self):
        return self._known_dtype if self.cached_data is None else self.cached_data.dtype

    def _release_recipe_buffers(self):
        token, self._recipe_buffers = getattr(self, "_recipe_buffers", None), None
        live_buffers.release(token)
        copies, self._copies = getattr(self, "_copies", ()), ()
        for copy in copies:
            spare_copies.give_back(copy)

    def __del__(self):
        _PENDING.pop(id(self), None)
        self._release_recipe_buffers()
        super().__del__()

    def is_pending(self) -> bool:
        """Whether the value has not been computed yet."""
        return self.cached_data is None


def keep_values_before_update(raw_arrays) -> None:
    """Give every pending gradient that uses one of ``raw_arrays`` its own copy first.

    The optimizers call it with the parameter arrays they are about to update in place. A
    gradient given its copies no longer depends on any parameter's array, so it leaves the
    pending set: each is copied at most once (the other operand of a product is a gradient,
    which no optimizer changes).
    """
    if not _PENDING:
        return
    targets = {id(raw) for raw in raw_arrays}
    for key, ref in list(_PENDING.items()):
        value = ref()
        recipe = None if value is None else value._recipe
        if recipe is None:
            _PENDING.pop(key, None)
            continue
        function, arrays, extra = recipe
        kept, copies = [], []
        for array in arrays:
            raw = array.raw
            if id(raw) in targets or (raw.base is not None and id(raw.base) in targets):
                array = spare_copies.copy_of(array)
                copies.append(array)
            kept.append(array)
        if copies:
            value._recipe = (function, tuple(kept), extra)
            value._copies = tuple(copies)
            previous, value._recipe_buffers = value._recipe_buffers, live_buffers.hold_all(tuple(kept))
            live_buffers.release(previous)
            _PENDING.pop(key, None)


def any_pending() -> bool:
    """Whether some deferred gradient still reads arrays an optimizer may change."""
    return bool(_PENDING)


def sole_readers(targets) -> dict:
    """``{id(raw): (gradient, position)}`` for each array whose id is in ``targets`` (a set or
    dict) that exactly one pending gradient reads, and reads as itself, at ``position`` of its
    recipe: what :mod:`needle.weight_handover` can hand over. An array read twice, or through a
    view, is left out."""
    sole, shared = {}, set()
    for ref in list(_PENDING.values()):  # NOTE: a copy: a gradient freed meanwhile leaves _PENDING
        value = ref()
        recipe = None if value is None else value._recipe
        if recipe is None:
            continue
        position = 0
        for array in recipe[1]:
            raw = array.raw
            key = id(raw)
            if key in targets:
                if key in sole:
                    shared.add(key)  # read a second time
                else:
                    sole[key] = (value, position)
            elif raw.base is not None and id(raw.base) in targets:
                shared.add(id(raw.base))  # read through a view
            position += 1
    for key in shared:
        sole.pop(key, None)
    return sole


def recipe_array(gradient, position):
    """The array at ``position`` of a pending gradient's recipe."""
    return gradient._recipe[1][position]


def give_old_array(gradient, position, old) -> None:
    """Let the pending ``gradient`` read ``old`` (an NDArray of the values its recipe's array at
    ``position`` had, which it now owns) instead: an optimizer is about to write the new values
    elsewhere (:mod:`needle.weight_handover`). It no longer reads a parameter's array."""
    function, arrays, extra = gradient._recipe
    gradient._recipe = (function, arrays[:position] + (old,) + arrays[position + 1 :], extra)
    gradient._copies = gradient._copies + (old,)
    _PENDING.pop(id(gradient), None)


def is_deferrable(value) -> bool:
    """Whether ``value``'s gradient may be deferred: a floating-point constant leaf, outside lazy mode."""
    if value.op is not None or value.requires_grad or autograd.LAZY_MODE:
        return False
    data = value.cached_data
    return data.__class__ is NDArray and data.raw.dtype.kind == "f"


def deferred_product(op, first, second, shape) -> DeferredGradient:
    """The gradient ``op.compute(first, second)`` of a constant of ``shape``, deferred.

    ``op`` is a product op (``MatMul`` with its transpose flags); ``first`` and ``second`` are
    Values whose arrays are taken now; the result is summed down to ``shape`` if it was broadcast.
    """
    return deferred_array_product(op, first.realize_cached_data(), second.realize_cached_data(), shape)


def deferred_array_product(op, a, b, shape) -> DeferredGradient:
    """:func:`deferred_product` of the NDArrays ``a`` and ``b``."""
    a_dtype, b_dtype = a.raw.dtype, b.raw.dtype
    dtype = a_dtype if a_dtype is b_dtype else numpy.result_type(a_dtype, b_dtype)
    shape = tuple(shape)
    return DeferredGradient.of(_product_summed_to, (a, b), shape, dtype, extra=(op, shape))


def _product_summed_to(a, b, op, shape):
    from .ops.ops_shape import unbroadcast_data

    return unbroadcast_data(op.compute(a, b), shape)
