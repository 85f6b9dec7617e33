"""Module and Parameter: how a model finds its learnable tensors, switches modes and saves its state.

A Module finds its Parameters, buffers (named in ``buffer_names``, such as BatchNorm's running
statistics) and submodules by walking its attributes, including lists, tuples and dicts, so the
course's plain ``self.layers = [...]`` style needs no registration calls.
"""
from __future__ import annotations

import collections
import collections.abc
from typing import Any

import numpy

from ..autograd import Tensor
from ..backend_ndarray import Device, NDArray, as_device


class Parameter(Tensor):
    """A Tensor that a Module reports as learnable (returned by ``parameters()``).

    Example:
        >>> import needle as ndl
        >>> p = ndl.nn.Parameter(ndl.init.ones(2))
        >>> p.requires_grad, isinstance(p, ndl.Tensor)
        (True, True)
    """

    __slots__ = ()
    _is_parameter = True


class StateDictError(KeyError, ValueError):
    """A state dict that does not fit the module: missing, unexpected or mis-shaped entries."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Module:
    """Base class of every layer and model: ``forward`` does the work, ``__call__`` runs it.

    Example:
        >>> import needle as ndl
        >>> from needle import nn
        >>> class TwoLayers(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layers = [nn.Linear(3, 4), nn.Linear(4, 2)]
        ...     def forward(self, x):
        ...         return self.layers[1](self.layers[0](x))
        >>> model = TwoLayers()
        >>> len(model.parameters()), list(model.state_dict())[:2]
        (4, ['layers.0.weight', 'layers.0.bias'])
        >>> model.eval().training, model.layers[0].training
        (False, False)
    """

    # attributes holding non-learnable state saved by state_dict (running statistics)
    buffer_names: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.training = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ---- finding parameters, buffers and submodules ---------------------------------------
    def _named_attributes(self):
        """(name, value) pairs to search for parameters, buffers and submodules."""
        return self.__dict__.items()

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        """``(name, parameter)`` pairs, each parameter once (under the first name it is found by)."""
        return [(name, tensor) for name, tensor, is_buffer in _named_tensors(self) if not is_buffer]

    def parameters(self) -> list[Parameter]:
        """Every Parameter of this module and its submodules, each once, in the order found.

        Returns:
            a list of Parameters (pass it to an optimizer).
        """
        return [tensor for _, tensor, is_buffer in _named_tensors(self) if not is_buffer]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        """``(name, tensor)`` pairs of the non-learnable state (e.g. BatchNorm running statistics)."""
        return [(name, tensor) for name, tensor, is_buffer in _named_tensors(self) if is_buffer]

    def named_children(self) -> list[tuple[str, Module]]:
        """``(name, module)`` for each submodule held directly by this module, each once.

        Names are attribute names, with list indices and dict keys joined by dots (``"layers.0"``);
        a Sequential names its layers by position (``"0"``).
        """
        found, seen = [], {id(self)}
        for name, value in self._named_attributes():
            _collect_named_modules(value, name, found, seen)
        return found

    def children(self) -> list[Module]:
        """The submodules held directly by this module (in attributes, lists, tuples, dicts), each once."""
        found, seen = [], {id(self)}
        for value in self.__dict__.values():
            _collect_modules(value, found, seen)
        return found

    def _children(self) -> list[Module]:
        """Every submodule below this one, depth first, each once (the course's name)."""
        found, seen = [], {id(self)}

        def visit(module):
            for child in module.children():
                if id(child) not in seen:
                    seen.add(id(child))
                    found.append(child)
                    visit(child)

        visit(self)
        return found

    def modules(self) -> list[Module]:
        """This module followed by every submodule below it, each once."""
        return [self] + self._children()

    # ---- modes ------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Switch this module and all its submodules to training mode (``mode=False``: evaluation).

        Returns:
            the module itself.
        """
        mode = bool(mode)
        self.training = mode
        for module in self._children():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Switch this module and all its submodules to evaluation mode; returns the module."""
        return self.train(False)

    # ---- devices and state ------------------------------------------------------------------
    def to(self, device: Device | str) -> Module:
        """Move every parameter, buffer and gradient to ``device`` in place; returns the module.

        Each tensor keeps its identity, so an optimizer built before still holds the same
        parameters. Everything is copied first and assigned after, so a failed copy moves nothing.

        Args:
            device: ``ndl.cpu()``, ``ndl.cuda()`` or a name: "cpu", "cuda", "cuda:0".

        Example:
            >>> import needle as ndl
            >>> layer = ndl.nn.Linear(2, 3).to("cpu")
            >>> layer.weight.device
            cpu()
        """
        device = as_device(device)
        moved_data, moved_grads = [], []
        for _, tensor, _ in _named_tensors(self):
            data = tensor.realize_cached_data()
            if data.device is not device:
                moved_data.append((tensor, data.to(device)))
            grad = tensor.grad
            if grad is not None and grad.device is not device:
                moved_grads.append((tensor, grad.realize_cached_data().to(device)))
        for tensor, data in moved_data:
            tensor.data = Tensor.make_const(data)
        for tensor, grad in moved_grads:
            tensor.grad = Tensor.make_const(grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient, as PyTorch's ``Module.zero_grad``.

        Args:
            set_to_none: True (the default) sets ``.grad`` to None; False sets existing
                gradients to zeros and leaves missing ones None.

        Example:
            >>> import needle as ndl
            >>> layer = ndl.nn.Linear(2, 1)
            >>> layer(ndl.Tensor([[1.0, 2.0]])).sum().backward()
            >>> layer.zero_grad()
            >>> layer.weight.grad is None
            True
        """
        for parameter in self.parameters():
            if set_to_none or parameter.grad is None:
                parameter.grad = None
            else:
                grad = parameter.grad.realize_cached_data()
                parameter.grad = Tensor.make_const(NDArray.wrap(grad.device.xp.zeros_like(grad.raw), grad.device))

    # ---- printing ---------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The settings shown inside this module's parentheses in ``repr`` (e.g. a layer's sizes)."""
        return ""

    def __repr__(self) -> str:
        """A PyTorch-style tree: the module's settings, then each submodule as ``(name): repr``."""
        return _module_tree(self, frozenset())

    def state_dict(self) -> dict[str, numpy.ndarray]:
        """Parameters and buffers as an ordered dict of name -> numpy copy.

        Names join attribute names, list indices and dict keys with dots (``"layers.1.bias"``);
        a Sequential names its layers by position (``"0.weight"``).
        """
        state = collections.OrderedDict()
        for name, tensor, _ in _named_tensors(self):
            data = tensor.realize_cached_data()
            host = data.numpy()
            state[name] = host.copy() if host is data.raw else host
        return state

    def load_state_dict(self, state: collections.abc.Mapping[str, Any], strict: bool = True) -> None:
        """Copy the arrays of ``state`` into this module's parameters and buffers.

        Everything is checked before anything is assigned, so on error the module is unchanged.

        Args:
            state: a mapping of name -> array (numpy, CuPy, NDArray or Tensor), as ``state_dict()`` gives.
            strict: when True, missing and unexpected names are errors; when False they are skipped.

        Raises:
            TypeError: ``state`` is not a dict.
            StateDictError (a KeyError and a ValueError): naming every missing, unexpected,
            non-numeric or mis-shaped entry.
        """
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(
                f"load_state_dict for {type(self).__name__} needs a dict of name -> array, as "
                f"module.state_dict() returns; got {type(state).__name__}"
            )
        targets = collections.OrderedDict((name, tensor) for name, tensor, _ in _named_tensors(self))
        problems, updates = [], []
        if strict:
            missing = [name for name in targets if name not in state]
            unexpected = [name for name in state if name not in targets]
            if missing:
                problems.append(f"missing keys: {missing}")
            if unexpected:
                problems.append(f"unexpected keys: {unexpected}")
        for name, tensor in targets.items():
            if name not in state:
                continue
            try:
                host = _to_host(state[name])
            except (TypeError, ValueError) as error:
                problems.append(f"{name!r}: not an array ({type(state[name]).__name__}: {error})")
                continue
            if host.dtype.kind not in "biuf":
                problems.append(f"{name!r}: must be a real numeric array, got dtype {host.dtype}")
                continue
            if host.shape != tensor.shape:
                problems.append(f"{name!r}: the checkpoint has shape {host.shape}, the module has {tensor.shape}")
                continue
            updates.append((tensor, host))
        if problems:
            raise StateDictError(
                f"load_state_dict for {type(self).__name__} failed, nothing was loaded:\n  "
                + "\n  ".join(problems)
                + "\n(save and load the same architecture, or pass strict=False to skip names)"
            )
        for tensor, host in updates:
            device, dtype = tensor.device, tensor.dtype
            raw = device.from_host(numpy.array(host, dtype=dtype, copy=True), dtype)
            tensor.data = Tensor.make_const(NDArray.wrap(raw, device))


def _module_tree(module, ancestors):
    """``module``'s repr tree; a module that contains one of its ``ancestors`` prints it as ``Name(...)``."""
    name = type(module).__name__
    if id(module) in ancestors:
        return f"{name}(...)"
    extra = module.extra_repr()
    children = module.named_children()
    if not children:
        return f"{name}({extra})"
    ancestors = ancestors | {id(module)}
    lines = [extra] if extra else []
    for child_name, child in children:
        own_repr = type(child).__repr__ is not Module.__repr__
        text = repr(child) if own_repr else _module_tree(child, ancestors)
        lines.append(f"({child_name}): " + text.replace("\n", "\n  "))
    body = "\n".join("  " + line for line in lines)
    return f"{name}(\n{body}\n)"


def _to_host(value):
    """A numpy array holding ``value`` (a numpy/CuPy array, NDArray, Tensor, or numbers)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, NDArray):
        return value.numpy()
    if hasattr(value, "get") and not isinstance(value, numpy.ndarray):
        return value.get()
    return numpy.asarray(value)


def _named_tensors(module):
    """``(name, tensor, is_buffer)`` for every parameter and buffer under ``module``, each once."""
    found, seen_tensors = [], set()
    _walk_module(module, "", found, seen_tensors, {id(module)})
    return found


def _walk_module(module, prefix, found, seen_tensors, seen_modules):
    buffers = module.buffer_names
    for name, value in module._named_attributes():
        if buffers and name in buffers and isinstance(value, Tensor) and not isinstance(value, Parameter):
            if id(value) not in seen_tensors:
                seen_tensors.add(id(value))
                found.append((prefix + name, value, True))
            continue
        _walk_value(value, prefix + name, found, seen_tensors, seen_modules)


def _walk_value(value, name, found, seen_tensors, seen_modules):
    if isinstance(value, Parameter):
        if id(value) not in seen_tensors:
            seen_tensors.add(id(value))
            found.append((name, value, False))
    elif isinstance(value, Module):
        if id(value) not in seen_modules:
            seen_modules.add(id(value))
            _walk_module(value, name + ".", found, seen_tensors, seen_modules)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk_value(item, f"{name}.{key}", found, seen_tensors, seen_modules)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _walk_value(item, f"{name}.{index}", found, seen_tensors, seen_modules)


def _collect_named_modules(value, name, found, seen):
    """Append ``(name, module)`` for the Modules directly inside ``value`` (looking into lists, tuples, dicts)."""
    if isinstance(value, Module):
        if id(value) not in seen:
            seen.add(id(value))
            found.append((name, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_named_modules(item, f"{name}.{key}", found, seen)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _collect_named_modules(item, f"{name}.{index}", found, seen)


def _collect_modules(value, found, seen):
    """Append the Modules directly inside ``value`` (looking into lists, tuples and dicts)."""
    if isinstance(value, Module):
        if id(value) not in seen:
            seen.add(id(value))
            found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_modules(item, found, seen)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_modules(item, found, seen)
