"""The Optimizer base class: holds parameters, clears their gradients, saves its state.

Optimizers touch data, never the graph: a step reads each parameter's ``.grad`` array and
updates the parameter's array in place (like PyTorch), so a step adds no graph node, leaves
``.grad`` as it was, and keeps the parameter's dtype.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy

from ..autograd import Tensor
from .. import updated_parameters, weight_handover
from ..backend_ndarray.kernels import Scratch
from ..deferred import keep_values_before_update
from ..gradient_graph import retire_graphs_of


class Optimizer:
    """Base class: ``step()`` updates the parameters, ``reset_grad()`` clears their gradients.

    Subclasses keep per-parameter state in dicts keyed by parameter (``self.u``, ``self.m``,
    ...) holding raw device arrays, list those dict names in ``state_names`` and their
    hyperparameters in ``hyperparameter_names``; ``state_dict``/``load_state_dict`` then work.
    """

    state_names: tuple[str, ...] = ()
    hyperparameter_names: tuple[str, ...] = ()
    params: list[Tensor]

    def __init__(self, params: Iterable[Tensor]) -> None:
        self.params = _checked_params(type(self).__name__, params)
        self._scratch = Scratch()  # this optimizer's own: never shared with another one
        updated_parameters.register(self, self.params)  # a parameter in no live optimizer is frozen

    def step(self) -> None:
        raise NotImplementedError()

    def reset_grad(self) -> None:
        """Set every parameter's ``.grad`` to None."""
        for param in self.params:
            param.grad = None

    zero_grad = reset_grad

    # ---- helpers for step() -----------------------------------------------------------------
    def _gradients(self):
        """``(param, weight, gradient, kernels)`` for each parameter that has a ``.grad``.

        ``weight`` is the parameter's raw array (to update in place), ``gradient`` the raw
        gradient, ``kernels`` the kernels of the parameter's device, which do the update.
        Every gradient's shape is checked before any is returned, so a bad one changes nothing.
        """
        return self._gradients_and_sources(hand_over=False)[0]

    def _gradients_and_sources(self, hand_over=True):
        """``(found, sources)``: :meth:`_gradients`, where a weight that a pending deferred
        gradient reads may have been given a new buffer (:mod:`needle.weight_handover`): its
        update must read the old values from ``sources[id(weight)]`` and write into ``weight``,
        which the kernels' ``sources`` argument does. SGD and Adam take it."""
        updated_parameters.count_step()
        found, mismatched = _read_gradients(self.params)
        if mismatched:
            self._refuse_mismatched_gradients()
        # NOTE: an optimizer step does not make older graphs stale (no mark_data_changed), as in
        # the course's needle: a graph carried across steps (a recurrent state that is never
        # detached) still backpropagates, through the weights as they are now, and the
        # MemoryMonitor reports it as a leak with the detach() fix. PyTorch raises there instead.
        # a course backward()'s deferred gradients still read the weights as they were at backward:
        # handed the old buffer where the update can be written out of place, else given a copy
        retire_graphs_of([param.grad for param, _, _, _ in found])  # their gradient graphs are about to go stale
        sources = weight_handover.hand_over(found) if hand_over else {}
        keep_values_before_update([weight for _, weight, _, _ in found])
        return found, sources

    def _step_out_of_place_where_safe(self):
        """SGD's and Adam's ``step``: :meth:`_gradients_and_sources`, then the subclass's
        ``_update(gradients, sources)``; an update that fails writes the handed-over weights'
        old values back, so a failed step changes no weight."""
        gradients, sources = self._gradients_and_sources()
        try:
            self._update(gradients, sources)
        except BaseException:
            weight_handover.restore_old_values(gradients, sources)
            raise

    def _refuse_mismatched_gradients(self):
        """Raise ValueError naming every parameter whose gradient has another shape (nothing is updated)."""
        problems = []
        for index, param in enumerate(self.params):
            if param.grad is not None and tuple(param.grad.shape) != tuple(param.shape):
                problems.append(
                    f"parameter {index} (shape {tuple(param.shape)}) has a gradient of shape {tuple(param.grad.shape)}"
                )
        raise ValueError(
            f"{type(self).__name__}.step: gradients must have their parameter's shape; nothing was updated:\n  "
            + "\n  ".join(problems)
            + "\n(set p.grad to a Tensor of p.shape, or let backward() compute it)"
        )

    # ---- state ------------------------------------------------------------------------------
    def _extra_state(self):
        return {}

    def _extra_state_problems(self, state_dict):
        """What is wrong with the ``_extra_state`` entries of ``state_dict`` (a list of messages)."""
        return []

    def _load_extra_state(self, state_dict):
        pass

    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters and per-parameter state (numpy copies, keyed by parameter index).

        Example:
            >>> import needle as ndl
            >>> w = ndl.nn.Parameter(ndl.init.ones(2))
            >>> opt = ndl.optim.Adam([w], lr=0.1)
            >>> w.grad = ndl.init.ones(2)
            >>> opt.step()
            >>> state = opt.state_dict()
            >>> state["optimizer"], state["t"], sorted(state["state"][0]), state["state"][0]["v"].shape
            ('Adam', 1, ['m', 'v'], (2,))
        """
        state = {}
        for index, param in enumerate(self.params):
            entry = {}
            for name in self.state_names:
                array = getattr(self, name).get(param)
                if array is not None:
                    entry[name] = _host_copy(array)
            if entry:
                state[index] = entry
        return {
            "optimizer": type(self).__name__,
            "hyperparameters": {name: getattr(self, name) for name in self.hyperparameter_names},
            "state": state,
            **self._extra_state(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` saved, for the same parameters in the same order.

        Everything is checked first; on error nothing changes.

        Raises:
            TypeError: ``state_dict`` is not a dict.
            ValueError: naming every problem (missing ``"state"``, unknown or mis-shaped state,
                a parameter index out of range, bad hyperparameters or step count).
        """
        name = type(self).__name__
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"{name}.load_state_dict needs the dict that optimizer.state_dict() returned; "
                f"got {type(state_dict).__name__}"
            )
        saved_type = state_dict.get("optimizer", name)
        if saved_type != name:
            raise ValueError(
                f"{name}.load_state_dict failed, nothing was loaded: the state was saved by {saved_type} and "
                f"this optimizer is {name}; build the optimizer the state was saved from "
                f"(ndl.optim.{saved_type}(model.parameters()))"
            )
        arrays, problems = self._checked_state_arrays(state_dict.get("state"))
        hyperparameters, hyperparameter_problems = self._checked_saved_hyperparameters(
            state_dict.get("hyperparameters", {})
        )
        problems += hyperparameter_problems
        problems += self._extra_state_problems(state_dict)
        if problems:
            raise ValueError(f"{name}.load_state_dict failed, nothing was loaded:\n  " + "\n  ".join(problems))
        # NOTE: every value was checked above, and the device copies are made before any assignment.
        device_arrays = []
        for index, state_name, host in arrays:
            data = self.params[index].realize_cached_data()
            device_arrays.append((index, state_name, data.device.from_host(host.astype(data.dtype), data.dtype)))
        for hyper, value in hyperparameters.items():
            setattr(self, hyper, value)
        for state_name in self.state_names:
            getattr(self, state_name).clear()
        for index, state_name, array in device_arrays:
            getattr(self, state_name)[self.params[index]] = array
        self._load_extra_state(state_dict)

    def _checked_state_arrays(self, saved):
        """``([(parameter index, state name, host array)], problems)`` for a saved ``"state"``."""
        if saved is None:
            return [], ['no "state" entry (per-parameter state by index)']
        if not isinstance(saved, Mapping):
            return [], [f'"state" must be a dict of parameter index -> state, got {type(saved).__name__}']
        arrays, problems, expected = [], [], list(self.state_names)
        for key, entry in saved.items():
            index = _parameter_index(key)
            if index is None or not 0 <= index < len(self.params):
                problems.append(f"state for parameter {key!r}, but this optimizer has {len(self.params)} parameters")
                continue
            where = f"parameter {index}: state"
            if not isinstance(entry, Mapping):
                problems.append(f"{where} must be a dict of name -> array, got {type(entry).__name__}")
                continue
            missing = [name for name in expected if name not in entry]
            if missing:
                problems.append(f"{where} {sorted(entry)} lacks {missing} (expected {expected})")
            shape = tuple(self.params[index].shape)
            for name, array in entry.items():
                if name not in expected:
                    problems.append(f"parameter {index}: unknown state {name!r} (expected {expected})")
                    continue
                host, problem = _numeric_host_array(array)
                if problem:
                    problems.append(f"{where} {name!r} {problem}")
                elif host.shape != shape:
                    problems.append(f"{where} {name!r} has shape {host.shape}, the parameter has {shape}")
                else:
                    arrays.append((index, name, host))
        return arrays, problems

    def _checked_saved_hyperparameters(self, saved):
        """``(all hyperparameters with the saved ones applied, problems)``."""
        current = {name: getattr(self, name) for name in self.hyperparameter_names}
        if not isinstance(saved, Mapping):
            return current, [f'"hyperparameters" must be a dict, got {type(saved).__name__}']
        unknown = set(saved) - set(self.hyperparameter_names)
        if unknown:
            names = sorted(map(str, unknown))
            return current, [f"unknown hyperparameters {names} (this {type(self).__name__} has {list(current)})"]
        try:
            return self._checked(**{**current, **saved}), []
        except ValueError as error:
            return current, [str(error)]

    def _set_hyperparameters(self, **values):
        for name, value in self._checked(**values).items():
            setattr(self, name, value)

    def _checked(self, **values):
        """The hyperparameters as Python floats; ValueError naming any bad one."""
        return values


def _host_copy(array):
    host = array if isinstance(array, numpy.ndarray) else array.get()
    return host.copy() if host is array else host


def check_number(
    name: str, value: Any, low: float | None = None, high: float | None = None, high_inclusive: bool = False
) -> float:
    """``value`` as a Python float, or a ValueError naming it when not finite or outside [low, high)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {name}={value}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {name}={value}")
    if high is not None and (value > high or (value == high and not high_inclusive)):
        bound = f"<= {high}" if high_inclusive else f"< {high}"
        raise ValueError(f"{name} must be {bound}, got {name}={value}")
    return value


def _checked_params(optimizer, params):
    """``params`` as a list of distinct Tensors, or a TypeError/ValueError that names the fix."""
    if isinstance(params, Tensor):
        raise TypeError(
            f"{optimizer} takes a list of parameters, got a single {type(params).__name__} of shape "
            f"{params.shape}; pass [param]"
        )
    if callable(getattr(params, "parameters", None)):
        raise TypeError(
            f"{optimizer} takes the parameters, got the module {type(params).__name__}; "
            f"pass model.parameters()"
        )
    if callable(params) and not isinstance(params, Iterable):
        raise TypeError(f"{optimizer} takes the parameters, got the function {params!r}: call it (model.parameters())")
    if isinstance(params, (str, bytes, Mapping)) or not isinstance(params, Iterable):
        raise TypeError(
            f"{optimizer} takes an iterable of parameters (e.g. model.parameters()), got {type(params).__name__}"
        )
    is_iterator = iter(params) is params
    unique, seen = [], set()
    for position, param in enumerate(params):
        if not isinstance(param, Tensor):
            raise TypeError(
                f"{optimizer}: parameter {position} is a {type(param).__name__} ({str(param)[:40]}), not a "
                f"needle Tensor; pass model.parameters() or a list of ndl.nn.Parameter"
            )
        if id(param) not in seen:
            seen.add(id(param))
            unique.append(param)
    if not unique:
        hint = (
            "the iterator was already used up (a generator can be read only once: call model.parameters() "
            "again, or keep a list)"
            if is_iterator
            else "does the model have parameters? pass model.parameters()"
        )
        raise ValueError(f"{optimizer} got an empty parameter list: {hint}")
    return unique


def _parameter_index(key):
    """A saved state key (an int, or an int as a string after JSON) as an int, or None."""
    if isinstance(key, bool):
        return None
    if isinstance(key, numbers.Integral):
        return int(key)
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return None


def _numeric_host_array(value):
    """``(numpy array, None)`` for numeric array data, else ``(None, what is wrong)``."""
    if hasattr(value, "get") and not isinstance(value, numpy.ndarray):
        value = value.get()  # a CuPy array
    elif hasattr(value, "numpy") and not isinstance(value, numpy.ndarray):
        value = value.numpy()  # a Tensor or NDArray
    try:
        host = numpy.asarray(value)
    except (TypeError, ValueError) as error:
        return None, f"is not an array ({type(value).__name__}: {error})"
    if host.dtype.kind not in "biuf":
        return None, f"must be a real numeric array, got dtype {host.dtype}"
    return host, None


def _read_gradients(params):
    """``(found, mismatched)``: :meth:`Optimizer._gradients`'s tuples, and whether a gradient's
    shape differs from its parameter's (a function of its own, so that no local variable of
    the step holds a parameter's array while :mod:`needle.weight_handover` counts its holders)."""
    found, mismatched = [], False
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        data = param.cached_data
        if data is None:
            data = param.realize_cached_data()
        gradient = grad.cached_data
        if gradient is None:
            gradient = grad.realize_cached_data()
        weight, gradient_raw = data.raw, gradient.raw
        if gradient_raw.shape != weight.shape:
            mismatched = True
        found.append((param, weight, gradient_raw, data.device.kernels))
    return found, mismatched
