"""The state a compiled step reads and writes: the models and optimizers it can reach.

``ndl.compile`` finds them in the function's arguments, closure, globals and ``self`` (and one
attribute level below those, such as a trainer's ``self.model``), as ``torch.compile`` guards on
what a function reaches. Their tensors are the plan's state slots; their attributes are part of
the signature, so ``model.eval()`` or a new ``Dropout.p`` selects another plan.
"""
import functools
import itertools
import operator
import types

from ..backend_ndarray import NDArray
from .sources import Sources

_SCALARS = (bool, int, float, str, type(None))
_MISSING = object()


class Held:
    """The slot of a tensor that no module attribute holds: a bare ``Parameter`` an optimizer
    updates, or a tensor the function reaches through its closure or globals."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __repr__(self):
        return f"Held({type(self.tensor).__name__} of shape {tuple(self.tensor.shape)})"


class StepState:
    """The modules, optimizers and other tensors a function uses, and the tensor slots they hold."""

    def __init__(self, modules, optimizers, tensors=(), sources=None):
        self.modules = modules
        self.optimizers = optimizers
        self.sources = sources if sources is not None else Sources({}, (), ())  # the function's globals and cells
        self._source_key = self.sources.key()
        slots, in_modules = [], set()
        for module in modules:
            for name, value in vars(module).items():
                if _is_tensor(value):
                    slots.append((module, name))
                    in_modules.add(id(value))
        # NOTE: a tensor no module holds is still state (its array traced, its replacement noticed)
        held = [p for o in optimizers for p in o.params] + list(tensors)
        for tensor in held:
            if id(tensor) not in in_modules:
                in_modules.add(id(tensor))
                slots.append((Held(tensor), "tensor"))
        parameters = [p for m in modules for p in m.parameters()] + [p for o in optimizers for p in o.params]
        parameters += [t for t in tensors if t.requires_grad]
        seen = set()
        for parameter in parameters:
            if id(parameter) not in seen:
                seen.add(id(parameter))
                slots.append((parameter, "grad"))
        self.slots = slots
        self._last = None  # (the attribute values last seen, flat; each module's count; their fingerprint)
        # NOTE: live views of the modules' attribute dicts, made once: the per-call check then
        # touches only the values. A module whose ``__dict__`` is replaced wholesale (not done by
        # needle, nor by assigning attributes) is not noticed.
        self._views = [vars(module).values() for module in modules]

    def attribute_values(self):
        """Every module's attributes as they are now (a dict per module), for :meth:`scalar_writes`."""
        return [dict(vars(module)) for module in self.modules]

    def scalar_writes(self, before, assigned=None):
        """``(owner, name, value)`` for what a replay sets again, as the call that captured set it:
        each module attribute set to another number, string, bool or None since ``before``
        (:meth:`attribute_values`; ``model.eval()`` inside a step), and each optimizer
        hyper-parameter the step assigned (``assigned``: optimizer -> names, from an
        :class:`~needle.compiler.assignment_watch.AssignmentWatch`; ``opt.lr = lr``)."""
        writes = []
        for module, values in zip(self.modules, before):
            for name, value in vars(module).items():
                old = values.get(name, _MISSING)
                if old is value or type(value) not in _SCALARS:
                    continue
                if type(old) is not type(value) or old != value:
                    writes.append((module, name, value))
        for opt in self.optimizers:
            for name in sorted((assigned or {}).get(opt, ())):
                value = getattr(opt, name, _MISSING)
                if type(value) in _SCALARS:
                    writes.append((opt, name, value))
        return tuple(writes)

    def fingerprint(self):
        """What the plan depends on: every module attribute (numbers by value, objects by identity),
        and the objects the function's sources held when this state was discovered.

        Returns the same object as the last call while no attribute was reassigned, so that a
        caller may compare fingerprints by identity.
        """
        last = self._last
        views = self._views
        if last is not None:
            # NOTE: the common case, nothing reassigned since the last call, is one pass of identity checks.
            values = itertools.chain.from_iterable(views)
            if list(map(len, views)) == last[1] and all(map(operator.is_, values, last[0])):
                return last[2]
        values = [tuple(view) for view in views]
        key = tuple(tuple(v if type(v) in _SCALARS else id(v) for v in vs) for vs in values) + (self._source_key,)
        self._last = (tuple(itertools.chain.from_iterable(values)), [len(vs) for vs in values], key)
        return key


def hyperparameters(opt):
    """The names of ``opt``'s hyper-parameters: its class's ``hyperparameter_names``, or, for an
    optimizer written without them (course homework), the usual names it has."""
    declared = getattr(type(opt), "hyperparameter_names", ())
    return declared or tuple(name for name in _USUAL_HYPERPARAMETERS if name in vars(opt))


_USUAL_HYPERPARAMETERS = ("lr", "momentum", "weight_decay", "beta1", "beta2", "eps")


def slots_still_held(expected_slots):
    """Whether each (owner, attribute, tensor, data, raw) still holds that tensor, with that array
    and raw buffer: a plan replays only state it was captured with."""
    for owner, attribute, tensor, data, raw in expected_slots:
        if getattr(owner, attribute, None) is not tensor:
            return False
        if tensor is not None and (tensor.cached_data is not data or (data is not None and data.raw is not raw)):
            return False
    return True


def read_slots(slots):
    """(owner, attribute, tensor, array) for each (owner, attribute) of ``slots``, as they are now:
    what :func:`keep_replaced_tensors` compares a call's state with."""
    held = []
    for owner, name in slots:
        tensor = getattr(owner, name, None)
        held.append((owner, name, tensor, tensor.cached_data if tensor is not None else None))
    return held


def keep_replaced_tensors(before):
    """Give back the tensors and arrays a call replaced, holding the new values.

    ``before`` is :func:`read_slots` of the state before the call. Each attribute the call set to
    a new tensor of the same shape and dtype (BatchNorm's running statistics) gets its old tensor
    back, and each tensor the call gave a new array (``p.data = p.data - lr * p.grad``, as
    course-written updates do) gets its old array back, with the new values copied in: the
    models' attributes, and so the signature of the next call, stay the same from call to call,
    and a plan's steps stay bound to the arrays they read. During a CUDA capture the copy is
    recorded, so every replay makes it.
    """
    for owner, name, tensor, data in before:
        current = getattr(owner, name, None)
        if tensor is None or current is None:
            continue
        if current is tensor:
            restore_arrays(((tensor, data),))
            continue
        old, new = tensor.realize_cached_data().raw, current.realize_cached_data().raw
        if old.shape != new.shape or old.dtype != new.dtype:
            continue
        old[...] = new
        setattr(owner, name, tensor)


def restore_arrays(before):
    """Give each tensor of ``before`` ((tensor, array) pairs read before a call) its array back where
    the call replaced it by one of the same shape, dtype and device, with the new values copied in.

    A course-written update (``p.data = p.data - lr * p.grad``) gives a parameter a new array at
    every step, while a plan's steps are bound to the array the capture saw. An array of another
    shape or dtype is left: the next call captures anew.
    """
    for tensor, data in before:
        current = tensor.cached_data
        if current is data or not isinstance(current, NDArray) or not isinstance(data, NDArray):
            continue
        if current.shape != data.shape or current.dtype != data.dtype or current.device != data.device:
            continue
        data.raw[...] = current.raw
        tensor._replace_data(data)


def adopt_replacements(expected_slots):
    """Put back the state a plan reads where eager code replaced it between calls by state of
    the same shape, dtype and device, with the new values copied in; True when anything was.

    ``expected_slots``: a plan's ``(owner, attribute, tensor, array, raw)``. Two replacements
    are adopted: a tensor given a new array (``p.data = p.data - lr * p.grad`` after a compiled
    forward and backward), and an attribute set to a new tensor that is not a Parameter
    (BatchNorm's running statistics after an eager training step; gradients). Copying the values
    gives a replay what eager code would compute. A new Parameter is not adopted: an optimizer
    may hold the old one, and which one it updates is the user's choice; nor is an array that
    shares memory with the state (two parameters' arrays swapped): those calls capture again.
    """
    from ..nn.module import Parameter
    from .recorder import root

    state_roots = {id(root(raw)) for _, _, _, _, raw in expected_slots if raw is not None}
    adoptions = []
    for owner, attribute, tensor, data, raw in expected_slots:
        if tensor is None or data is None or tensor.cached_data is None:
            continue
        current = getattr(owner, attribute, None)
        if current is tensor:
            new = tensor.cached_data
            if new is data or data.raw is not raw:
                continue
        elif current is None or isinstance(owner, Held) or isinstance(tensor, Parameter) or isinstance(current, Parameter):
            continue
        elif tensor.cached_data is not data or data.raw is not raw:
            continue
        else:
            new = current.cached_data
        if not isinstance(new, NDArray) or new.shape != data.shape or new.dtype != data.dtype or new.device != data.device:
            continue
        if id(root(new.raw)) in state_roots:
            continue
        adoptions.append((owner, attribute, tensor, data, new))
    for owner, attribute, tensor, data, new in adoptions:
        data.raw[...] = new.raw
        if getattr(owner, attribute, None) is tensor:
            tensor._replace_data(data)
        else:
            setattr(owner, attribute, tensor)
    return bool(adoptions)


def discover(fn, args, kwargs):
    """The :class:`StepState` of ``fn`` called with ``args`` and ``kwargs``."""
    from ..nn.module import Module
    from ..optim.optimizer import Optimizer

    from ..tensor import Tensor

    modules, optimizers, tensors, seen = [], [], [], set()

    def collect(value, depth, reached=True):
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, Tensor):
            if reached:  # NOTE: not the arguments: those are the step's inputs
                tensors.append(value)
        elif isinstance(value, Module):
            for module in value.modules():
                if id(module) not in seen or module is value:
                    seen.add(id(module))
                    modules.append(module)
        elif isinstance(value, Optimizer):
            optimizers.append(value)
        elif type(value) in (list, tuple):
            for item in value:
                collect(item, depth, reached)
        elif type(value) is dict:
            for item in value.values():
                collect(item, depth, reached)
        elif isinstance(value, (types.FunctionType, types.MethodType)) and depth > 0:
            for item in _reached_by(value):  # a helper the step calls: what it reaches counts too
                collect(item, depth - 1)
        elif depth > 0 and hasattr(value, "__dict__") and not isinstance(value, _OPAQUE):
            for item in vars(value).values():
                collect(item, depth - 1)

    for argument in list(args) + list(kwargs.values()):
        collect(argument, 2, reached=False)
    for candidate in _reached_by(fn):
        collect(candidate, 2)
    return StepState(modules, optimizers, tensors, Sources.of(fn))


def _reached_by(fn):
    """What ``fn`` can reach directly: its closure, the globals it names, and ``self``; for a
    callable object (a Module compiled as ``ndl.compile(model)``) the object itself; for a
    ``functools.partial``, its bound arguments and what its function reaches."""
    if isinstance(fn, functools.partial):
        return list(fn.args) + list(fn.keywords.values()) + _reached_by(fn.func)
    if not isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return [fn]  # NOTE: its __call__ (forward) reads its own attributes
    found = []
    function = getattr(fn, "__func__", fn)
    for cell in getattr(function, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        found.append(owner)
    code, names = getattr(function, "__code__", None), getattr(function, "__globals__", {})
    if code is not None:
        found.extend(names[name] for name in code.co_names if name in names)
    return found


_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _is_tensor(value):
    from ..tensor import Tensor

    return isinstance(value, Tensor)
