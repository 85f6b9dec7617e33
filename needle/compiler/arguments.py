"""A compiled step's inputs among its arguments: Tensors and numpy arrays, also inside containers.

A loop may pass its batch as ``step(x, y)``, as ``step(batch)`` with ``batch = (x, y)``, or as a
dict (``step({"image": x, "label": y})``). Every Tensor and numeric numpy array found in the
arguments, and in the tuples, lists and dicts among them (nested too), is an input: part of the
signature by shape and dtype (a Tensor also by device and ``requires_grad``), copied into the
plan's buffers at each replay. Everything else is a Python value, part of the signature by value
(or by identity when it cannot be hashed), as ``torch.compile`` and ``jax.jit`` treat their
arguments.

A position is an argument's index (or keyword), or, inside a container, a tuple path:
``(0, 1)`` is ``args[0][1]``, ``("batch", "label")`` is ``kwargs["batch"]["label"]``.

Example:
    >>> import numpy as np, needle as ndl
    >>> x, y = ndl.Tensor(np.zeros((2, 3))), np.array([0, 1])
    >>> args, kwargs, positions = map_inputs(((x, y), 5), {}, lambda position, value: position)
    >>> args, positions
    ([((0, 0), (0, 1)), 5], [(0, 0), (0, 1)])
    >>> argument_at(((x, y), 5), {}, (0, 1)) is y
    True
"""
import numpy

INPUT_ARRAY_KINDS = "biuf"  # the dtype kinds of numpy arguments taken as inputs (others are Python values)


def is_input_array(value):
    """Whether ``value`` is a numpy array that a capture takes as an input (by shape and dtype)."""
    return value.__class__ is numpy.ndarray and value.dtype.kind in INPUT_ARRAY_KINDS


def is_input(value):
    """Whether ``value`` is an input: a Tensor or a numeric numpy array."""
    from ..tensor import Tensor

    return is_input_array(value) or isinstance(value, Tensor)


def argument_key(value):
    """The part of a call's signature that ``value`` (one argument) makes."""
    from ..tensor import Tensor

    if value.__class__ is numpy.ndarray and value.dtype.kind in INPUT_ARRAY_KINDS:
        return ("array", value.shape, value.dtype)  # an input, like a Tensor's array (as jax.jit takes them)
    if isinstance(value, Tensor):
        data = value.cached_data
        if data is None:
            data = value.realize_cached_data()
        raw = data.raw
        return ("tensor", raw.shape, raw.dtype, data.device.name, value.requires_grad)
    if _is_sequence(value):
        return ("sequence", type(value), tuple(map(argument_key, value)))
    if type(value) is dict:
        try:
            items = sorted(value.items(), key=lambda item: item[0])  # as jax's pytrees: the keys' order is no matter
        except TypeError:  # keys that do not compare (a str and an int)
            items = value.items()
        return ("dict", tuple((key, argument_key(item)) for key, item in items))
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return ("value", type(value), value)


def map_inputs(args, kwargs, make):
    """``(args, kwargs, positions)`` with each input replaced by ``make(position, input)``, the
    containers around them rebuilt, and the positions of the inputs in the order ``make`` saw them."""
    positions = []

    def mapped(position, value):
        if is_input(value):
            positions.append(position)
            return make(position, value)
        if _is_sequence(value):
            items = [mapped(_inner(position, index), item) for index, item in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if type(value) is dict:
            return {key: mapped(_inner(position, key), item) for key, item in value.items()}
        return value

    new_args = [mapped(index, value) for index, value in enumerate(args)]
    new_kwargs = {name: mapped(name, value) for name, value in kwargs.items()}
    return new_args, new_kwargs, positions


def inputs_of(args, kwargs):
    """``[(position, input)]`` for every input of a call, in :func:`map_inputs`'s order."""
    found = []
    map_inputs(args, kwargs, lambda position, value: found.append((position, value)))
    return found


def argument_at(args, kwargs, position):
    """The argument at ``position`` (an index, a keyword, or a path into containers)."""
    if type(position) is not tuple:
        return args[position] if isinstance(position, int) else kwargs[position]
    value = args[position[0]] if isinstance(position[0], int) else kwargs[position[0]]
    for key in position[1:]:
        value = value[key]
    return value


def _is_sequence(value):
    return type(value) in (tuple, list) or (isinstance(value, tuple) and hasattr(value, "_fields"))


def _inner(position, key):
    return (position if type(position) is tuple else (position,)) + (key,)
