"""Deferred results: the work that only a replay's result needs, done when the result is read.

A training step returns its loss, and most loops never read it. The steps that compute only
the returned values (the loss's logarithms, its gather and sums), and nothing the model, the
optimizer or a guard needs, are split off by :func:`deferrable_steps`. A replay skips them and
returns a :class:`PendingResult`, which runs them (once per replay) and copies the value when
it is first read; the plan reads every pending result of a replay before the next replay
overwrites their buffers (:meth:`needle.compiler.plan.Plan.replay`), so a result kept for later
still holds its own step's value, bitwise the value of an eager run: the same calls on the
same arrays, only later.

That is only sound when nothing else can change what the deferred steps read between the
replay and the read. So they may read only buffers the plan alone can write (its input copies,
and arrays the capture made that no tensor, gradient or state exposes), no step that stays in
the replay may write those buffers after them, and they write nothing that the replay uses.
Otherwise nothing is deferred and the replay computes its results as before.
"""
import functools
import sys

import numpy

from ..backend_ndarray import NDArray
from ..tensor import Tensor
from .recorder import root


def deferrable_steps(steps, core, wanted, private):
    """The indices, in order, of the steps in ``wanted`` (needed for the results) but not in
    ``core`` (needed for the state) that may run after the replay; empty when they may not.

    ``private`` holds ids of the root buffers only the plan can write.
    """
    candidates = sorted(wanted - core)
    if not candidates:
        return []
    later_core_writes, written = {}, set()  # index -> what core steps after it write
    used_by_core = set()
    for index in range(len(steps) - 1, -1, -1):
        if index in core:
            written |= steps[index].writes
            used_by_core |= steps[index].reads | steps[index].writes
        later_core_writes[index] = frozenset(written)
    deferred_writes = set().union(*(steps[index].writes for index in candidates))
    if deferred_writes & used_by_core:
        return []
    exclusive = _arrays_only_steps_hold(steps)
    for index in candidates:
        step = steps[index]
        if step.effect or step.run.__class__ is not functools.partial:
            return []
        if step.reads & later_core_writes[index]:
            return []
        for key in step.reads - private - deferred_writes:
            if key not in exclusive:
                return []
    return candidates


def _arrays_only_steps_hold(steps):
    """Ids of the root arrays that nothing but the steps' calls refers to (no one else can change them).

    NOTE: an array that the capture made outside the traced arrays (needle's ``arange`` of row
    ids for a gather) is not among the plan's buffers, but when the steps' calls are its only
    holders nobody else can write it. Counted from CPython's reference counts: one reference
    per place a call holds it, beyond what the count reads for a probe array that only this
    function's table holds (so the interpreter's own way of counting cancels out).
    """
    places, seen = {}, set()  # id -> [array, how many places in the calls hold it]

    def visit(value):
        if isinstance(value, numpy.ndarray):
            if value.base is None:
                places.setdefault(id(value), [value, 0])[1] += 1
            return
        if type(value) in (tuple, list, dict):
            if id(value) in seen:
                return
            seen.add(id(value))
            for item in value.values() if type(value) is dict else value:
                visit(item)

    for step in steps:
        if step.run.__class__ is functools.partial:
            visit(step.run.args)
            visit(step.run.keywords)
    places[_PROBE] = [numpy.empty(0), 0]  # held by the table alone: what the count reads for "nobody else"
    counts = {key: sys.getrefcount(array) - count for key, (array, count) in places.items()}
    nobody_else = counts.pop(_PROBE)
    return {key for key, extra in counts.items() if extra == nobody_else}


_PROBE = "probe"


class PendingResult(Tensor):
    """A replay's result whose value is computed and copied when first needed (see the module doc).

    A leaf without a graph, as every replayed result; ``.numpy()``, ``.item()``, ``float()``,
    printing and ops all read it through ``realize_cached_data``.
    """

    __slots__ = ("_plan", "_source", "_device")

    @classmethod
    def of(cls, plan, buffer, device):
        """The value ``buffer`` will hold once ``plan.finish()`` has run, as a Tensor on ``device``."""
        result = cls.make_const(None)
        result._plan, result._source, result._device = plan, buffer, device
        return result

    def realize_cached_data(self):
        data = self.cached_data
        if data is None:
            self._plan.finish()
            data = NDArray.wrap(self._source.copy(), self._device)
            self._plan = self._source = self._device = None
            self._set_cached_data(data)
        return data

    def is_pending(self) -> bool:
        """Whether the value has not been computed yet."""
        return self.cached_data is None
