"""The repeat guard: one generated check that a call may replay the plan of the call before it.

A training loop calls its compiled step with arguments like the last call's, on a model nobody
changed in between. :class:`~needle.compiler.compiled.CompiledFunction` would check that by
building the call's signature (each argument's key, the models' fingerprint, the gradient mode)
and then the plan's state (:meth:`~needle.compiler.capture.Capture.ready`). Each of those is a
loop over Python objects, and at a small batch a step's Python is a large part of its time.

:func:`repeat_guard` writes the same checks for one plan as straight-line code with the
expected values as constants (the argument classes, shapes, dtypes, devices and
``requires_grad``; the gradient mode; every attribute of every model, by identity; the objects
behind the function's global names and closure variables, by identity; the state slots
``Capture.ready`` checks), so a repeated call costs one function call and a few dozen
comparisons. Any difference makes it return False, and the call takes the full path, which
decides as before (another plan, a new capture, or this one). It never says True where the
full path would not replay this plan: every value it compares by identity, the full path
compares by identity or by value.

Example:
    >>> import needle as ndl
    >>> model = ndl.nn.Linear(2, 1)
    >>> step = ndl.compile(lambda x: model(x))
    >>> x = ndl.Tensor([[1.0, 2.0]])
    >>> with ndl.no_grad():                           # (an evaluation: see compile)
    ...     _ = step(x); _ = step(x)                 # a capture, then a replay through the full path
    ...     print(step._repeat is not None and step._repeat[0]((x,)))
    ...     _ = model.eval()                          # a model attribute changed: the guard says no
    ...     print(step._repeat[0]((x,)))
    True
    False
"""
import numpy

from ..grad_mode import GRAD_MODE
from ..tensor import Tensor
from .arguments import INPUT_ARRAY_KINDS
from .sources import MISSING, cell_value



def repeat_guard(args, state, entry):
    """A function of a call's positional arguments: True when that call has the signature and the
    state of this one (positional ``args`` with ``state``'s models, replayed by ``entry``, a
    :class:`~needle.compiler.capture.Capture`), else False. None when the arguments include
    anything but Tensors and numpy batches (also in tuples, lists and dicts), for which the full
    path's checks stay the only ones."""
    lines, constants = [f"if len(args) != {len(args)}: return False"], {
        "GRAD_MODE": GRAD_MODE, "MISSING": MISSING, "ndarray": numpy.ndarray, "cell_value": cell_value,
    }

    def constant(value):
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    for index, value in enumerate(args):
        checks = _input_checks(f"args[{index}]", value, constant)
        if checks is None:
            return None
        lines += checks
    lines.append(f"if GRAD_MODE.enabled is not {constant(GRAD_MODE.enabled)}: return False")
    # NOTE: the function's globals and closure variables, by identity (a rebound name: the full path)
    sources = state.sources
    if sources.names:
        lines.append(f"g = {constant(sources.globals)}")
    for name, value in zip(sources.names, sources.values):
        lines.append(f"if g.get({constant(name)}, MISSING) is not {constant(value)}: return False")
    for cell, value in zip(sources.cells, sources.values[len(sources.names):]):
        lines.append(f"if cell_value({constant(cell)}) is not {constant(value)}: return False")
    for module in state.modules:
        attributes = vars(module)
        table = constant(attributes)
        lines.append(f"if len({table}) != {len(attributes)}: return False")
        for name, value in attributes.items():
            lines.append(f"if {table}.get({constant(name)}, MISSING) is not {constant(value)}: return False")
    # NOTE: Capture.ready's checks, written out: the slots that must still hold the captured tensors.
    for owner, attribute, tensor, data, raw in entry.expected_slots:
        lines.append(f"t = getattr({constant(owner)}, {constant(attribute)}, None)")
        lines.append(f"if t is not {constant(tensor)}: return False")
        if tensor is not None:
            lines.append(f"if t.cached_data is not {constant(data)} or {constant(data)}.raw is not {constant(raw)}: return False")
    # NOTE: and what else the plan's ready() checks (a CUDA graph's optimizer state, by identity)
    for check in getattr(entry, "ready_checks", ()):
        lines.append(f"if not {constant(check)}(): return False")
    lines.append("return True")
    names = ", ".join(constants)
    source = f"def make({names}):\n    def guard(args):\n" + "".join(f"        {line}\n" for line in lines)
    source += "    return guard\n"
    namespace = {}
    exec(compile(source, "<ndl.compile repeat guard>", "exec"), namespace)
    return namespace["make"](*constants.values())


def _input_checks(expression, value, constant):
    """Lines checking that ``expression`` (an argument, or an item of one) is an input like
    ``value`` (a Tensor or numpy batch, or a tuple, list or dict of them); None for anything else."""
    if value.__class__ is numpy.ndarray and value.dtype.kind in INPUT_ARRAY_KINDS:
        return [  # a numpy batch: an input, by class, shape and dtype
            f"a = {expression}",
            "if a.__class__ is not ndarray: return False",
            f"if a.shape != {constant(value.shape)} or a.dtype != {constant(value.dtype)}: return False",
        ]
    if isinstance(value, Tensor):
        data = value.cached_data
        if data is None:
            return None
        raw = data.raw
        return [
            f"a = {expression}",
            f"if a.__class__ is not {constant(value.__class__)}: return False",
            "d = a.cached_data",
            "if d is None: return False",
            "r = d.raw",
            f"if r.shape != {constant(raw.shape)} or r.dtype != {constant(raw.dtype)}: return False",
            f"if d.device.name != {constant(data.device.name)} or a.requires_grad is not {constant(value.requires_grad)}: return False",
        ]
    if value.__class__ in (tuple, list, dict) or (isinstance(value, tuple) and hasattr(value, "_fields")):
        keys = list(value) if value.__class__ is dict else range(len(value))
        lines = [  # a container of inputs: its class, its length (its keys, in order), then each item
            f"a = {expression}",
            f"if a.__class__ is not {constant(value.__class__)} or len(a) != {len(value)}: return False",
        ]
        if value.__class__ is dict:
            lines.append(f"if list(a) != {constant(keys)}: return False")
        for key in keys:
            item = _input_checks(f"{expression}[{constant(key)}]", value[key], constant)
            if item is None:
                return None
            lines += item
        return lines
    return None
