"""The Optimizer base class: holds parameters, clears their gradients, saves its state.

Optimizers touch data, never the graph: a step reads each parameter's ``.grad`` array and
updates the parameter's array in place (like PyTorch), so a step adds no graph node, leaves
``.grad`` as it was, and keeps the parameter's dtype.
"""
import numbers

import numpy

from ..autograd import mark_data_changed

class Optimizer:
    """Base class: ``step()`` updates the parameters, ``reset_grad()`` clears their gradients.

    Subclasses keep per-parameter state in dicts keyed by parameter (``self.u``, ``self.m``,
    ...) holding raw device arrays, list those dict names in ``state_names`` and their
    hyperparameters in ``hyperparameter_names``; ``state_dict``/``load_state_dict`` then work.
    """

    state_names = ()
    hyperparameter_names = ()

    def __init__(self, params):
        unique, seen = [], set()
        for param in params:
            if id(param) not in seen:
                seen.add(id(param))
                unique.append(param)
        self.params = unique

    def step(self):
        raise NotImplementedError()

    def reset_grad(self):
        """Set every parameter's ``.grad`` to None."""
        for param in self.params:
            param.grad = None

    zero_grad = reset_grad

    # ---- helpers for step() -----------------------------------------------------------------
    def _gradients(self):
        """``(param, weight, gradient, fused)`` for each parameter that has a ``.grad``.

        ``weight`` is the parameter's raw array (to update in place), ``gradient`` the raw
        gradient, ``fused`` the fused routines of the parameter's device, which do the update.
        """
        updated = [param for param in self.params if param.grad is not None]
        mark_data_changed(*updated)  # graphs built from the old values can no longer backward()
        for param in updated:
            data = param.realize_cached_data()
            yield param, data.raw, param.grad.realize_cached_data().raw, data.device.fused

    # ---- state ------------------------------------------------------------------------------
    def _extra_state(self):
        return {}

    def _load_extra_state(self, state):
        pass

    def state_dict(self):
        """Hyperparameters and per-parameter state (numpy copies, keyed by parameter index).

        Example:
            >>> import needle as ndl
            >>> w = ndl.nn.Parameter(ndl.init.ones(2))
            >>> opt = ndl.optim.SGD([w], lr=0.1, momentum=0.9)
            >>> w.grad = ndl.init.ones(2)
            >>> opt.step()
            >>> opt.state_dict()["state"][0]["u"].tolist()
            [0.10000000149011612, 0.10000000149011612]
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
            "hyperparameters": {name: getattr(self, name) for name in self.hyperparameter_names},
            "state": state,
            **self._extra_state(),
        }

    def load_state_dict(self, state_dict):
        """Restore what ``state_dict`` saved, for the same parameters in the same order.

        Everything is checked first; on error nothing changes.
        """
        saved = state_dict["state"]
        problems = []
        for index, entry in saved.items():
            index = int(index)
            if not 0 <= index < len(self.params):
                problems.append(f"state for parameter {index}, but this optimizer has {len(self.params)} parameters")
                continue
            shape = self.params[index].shape
            for name, array in entry.items():
                if name not in self.state_names:
                    problems.append(f"parameter {index}: unknown state {name!r} (expected {list(self.state_names)})")
                elif tuple(numpy.shape(array)) != tuple(shape):
                    problems.append(
                        f"parameter {index}: state {name!r} has shape {tuple(numpy.shape(array))}, the parameter has {shape}"
                    )
        hyperparameters = {name: getattr(self, name) for name in self.hyperparameter_names}
        saved_hyperparameters = state_dict.get("hyperparameters", {})
        unknown = set(saved_hyperparameters) - set(self.hyperparameter_names)
        if unknown:
            problems.append(f"unknown hyperparameters {sorted(unknown)}")
        else:
            hyperparameters.update(saved_hyperparameters)
            try:
                hyperparameters = self._checked(**hyperparameters)
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise ValueError(f"{type(self).__name__}.load_state_dict failed, nothing was loaded:\n  " + "\n  ".join(problems))
        for name, value in hyperparameters.items():
            setattr(self, name, value)
        for name in self.state_names:
            getattr(self, name).clear()
        for index, entry in saved.items():
            param = self.params[int(index)]
            data = param.realize_cached_data()
            for name, array in entry.items():
                getattr(self, name)[param] = data.device.from_host(numpy.array(array, copy=True), data.dtype)
        self._load_extra_state(state_dict)

    def _set_hyperparameters(self, **values):
        for name, value in self._checked(**values).items():
            setattr(self, name, value)

    def _checked(self, **values):
        """The hyperparameters as Python floats; ValueError naming any bad one."""
        return values


def _host_copy(array):
    host = array if isinstance(array, numpy.ndarray) else array.get()
    return host.copy() if host is array else host


def check_number(name, value, low=None, high=None, high_inclusive=False):
    """``value`` as a Python float, or a ValueError naming it when outside [low, high)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if value != value or (low is not None and value < low):
        raise ValueError(f"{name} must be >= {low}, got {name}={value}")
    if high is not None and (value > high or (value == high and not high_inclusive)):
        bound = f"<= {high}" if high_inclusive else f"< {high}"
        raise ValueError(f"{name} must be {bound}, got {name}={value}")
    return value
