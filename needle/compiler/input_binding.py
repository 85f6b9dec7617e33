"""Input binding: a replay reads the caller's input array where it is, instead of a copy of it.

A plan's steps are calls bound to the arrays of the capture, the input buffers among them, so a
replay would first copy each new input into its buffer. For an input that only a few replayed
calls read (the data batch: the first layer's product and its weight's gradient), an
:class:`InputBinding` names those calls and the arguments that are the buffer (or its
transpose); the replay function takes the input there as a parameter
(:mod:`needle.compiler.replay_function`), so a replay passes the caller's array instead of
copying the whole batch.

The caller may change or reuse its array after the call: nothing reads the array after the
replay returns (no deferred result, guard, writeback or returned value may use a bound input).
Where an array cannot be read in place (another layout, an array that shares memory with the
plan's own buffers), the replay copies it into the buffer and passes the buffer.
"""
import functools
import weakref

import numpy

from .recorder import root


class InputBinding:
    """The replayed calls that read one input buffer, and how to point them at another array."""

    __slots__ = ("buffer", "sites", "owned", "bound")

    def __init__(self, buffer, sites, owned):
        self.buffer = buffer
        self.sites = sites  # (position in the runs, ((argument index, transposed), ...)), per call that reads it
        self.owned = owned  # id -> weak reference of each of the plan's own root buffers (None: unnamed): an input sharing one is copied
        self.bound = buffer  # the array the last replay read: the caller's, or the buffer it was copied into

    @classmethod
    def find(cls, buffer, runs, other_uses, owned):
        """The binding of ``buffer`` in ``runs`` (the plan's calls), or None when something else uses it.

        ``other_uses`` holds ids of the root buffers that a guard, a deferred step, a result or
        a writeback uses, or that a step writes; ``owned`` maps the id of each root buffer of the
        plan to a weak reference of it (None where the plan cannot name the buffer).
        """
        key = id(buffer)
        if key in other_uses or not buffer.flags.c_contiguous:
            return None
        sites = []
        for position, run in enumerate(runs):
            if run.__class__ is not functools.partial:
                continue
            arguments, substitutions = run.args, []
            for index, argument in enumerate(arguments):
                if isinstance(argument, numpy.ndarray) and id(root(argument)) == key:
                    transposed = _transposed(argument, buffer)
                    if transposed is None:
                        return None
                    substitutions.append((index, transposed))
                elif _holds_buffer(argument, key):
                    return None
            if _holds_buffer(run.keywords, key):
                return None
            if substitutions:
                sites.append((position, tuple(substitutions)))
        return cls(buffer, tuple(sites), owned) if sites else None

    def accepts(self, array):
        """Whether the replay may read ``array`` (of the buffer's shape and dtype) where it is."""
        if array.__class__ is not numpy.ndarray or not array.flags.c_contiguous:
            return False
        base = array.base
        owner = array if base is None else root(array)
        # NOTE: by identity, through a weak reference: a buffer of the capture that has been freed
        # since left its id behind, and a new array (the next batch) can be given that id.
        reference = self.owned.get(id(owner), _NOT_OWNED)
        return reference is _NOT_OWNED or (reference is not None and reference() is not owner)


_NOT_OWNED = object()


def weak_buffers(ids, buffers):
    """``{id: weak reference}`` for the root buffers ``ids``, named through ``buffers`` (id -> root
    array); None for an id that ``buffers`` does not name (an input sharing it is copied)."""
    return {key: (weakref.ref(buffers[key]) if key in buffers else None) for key in ids}


def _transposed(view, buffer):
    """False when ``view`` is ``buffer`` seen whole, True when it is its transpose, else None."""
    if view.dtype != buffer.dtype or view.ctypes.data != buffer.ctypes.data:
        return None
    if view.shape == buffer.shape and view.strides == buffer.strides:
        return False
    if view.shape == buffer.shape[::-1] and view.strides == buffer.strides[::-1]:
        return True
    return None


def _holds_buffer(value, key):
    if isinstance(value, numpy.ndarray):
        return id(root(value)) == key
    if type(value) in (tuple, list):
        return any(_holds_buffer(item, key) for item in value)
    if type(value) is dict:
        return any(_holds_buffer(item, key) for item in value.values())
    return False
