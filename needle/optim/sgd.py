"""Stochastic gradient descent with the course's momentum rule."""
from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from .optimizer import Optimizer, check_number

if TYPE_CHECKING:
    from ..autograd import Tensor


class _Velocities(MutableMapping):
    """SGD's velocities ``u`` in the course's units, stored scaled as ``u / (1 - momentum)``.

    With ``v = u / (1 - momentum)`` the rule ``u = momentum * u + (1 - momentum) * grad`` becomes
    ``v = momentum * v + grad``: the gradient needs no scaling pass, so a step costs four passes
    over each parameter, as the hand-written floor's does. Reading ``u[p]`` gives the course's
    ``u``; writing it stores the scaled form.
    """

    def __init__(self, momentum):
        self.scaled = {}
        self.momentum = momentum  # the momentum the stored values are scaled by

    def rescale(self, momentum):
        """Keep every ``u`` unchanged while the scale moves to a new ``momentum``."""
        factor = (1 - self.momentum) / (1 - momentum)
        for value in self.scaled.values():
            value *= factor
        self.momentum = momentum

    def __getitem__(self, param):
        return self.scaled[param] * (1 - self.momentum)

    def __setitem__(self, param, velocity):
        self.scaled[param] = velocity / (1 - self.momentum)

    def __delitem__(self, param):
        del self.scaled[param]

    def __iter__(self):
        return iter(self.scaled)

    def __len__(self):
        return len(self.scaled)


class SGD(Optimizer):
    """SGD with momentum and weight decay, as the course defines them::

        grad = p.grad + weight_decay * p
        u = momentum * u + (1 - momentum) * grad      (u starts at zero)
        p = p - lr * u

    Parameters are updated in place; parameters whose ``.grad`` is None are skipped. With
    ``momentum=0`` the velocity equals the gradient and is not kept in ``self.u``. ``state_dict()``
    saves the velocities as kept, ``u / (1 - momentum)`` (PyTorch's ``momentum_buffer``), so a
    run resumed from it continues bitwise.

    Args:
        params: the parameters to update (e.g. ``model.parameters()``).
        lr: learning rate (>= 0).
        momentum: in [0, 1).
        weight_decay: L2 penalty (>= 0).

    Example:
        >>> import needle as ndl
        >>> w = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0]))
        >>> w.grad = ndl.Tensor([1.0, 1.0])
        >>> ndl.optim.SGD([w], lr=0.5).step()
        >>> w.numpy().tolist()
        [0.5, 1.5]
    """

    # NOTE: the state saved is the velocity as kept, u / (1 - momentum) (PyTorch's
    # momentum_buffer), with the momentum it is scaled by, so that a save and load is exact.
    state_names = ("momentum_buffer",)
    hyperparameter_names = ("lr", "momentum", "weight_decay")
    lr: float
    momentum: float
    weight_decay: float

    def __init__(
        self, params: Iterable[Tensor], lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0
    ) -> None:
        super().__init__(params)
        self._set_hyperparameters(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.u = _Velocities(self.momentum)

    def _checked(self, lr, momentum, weight_decay):
        return {
            "lr": check_number("lr", lr, low=0),
            "momentum": check_number("momentum", momentum, low=0, high=1),
            "weight_decay": check_number("weight_decay", weight_decay, low=0),
        }

    @property
    def momentum_buffer(self) -> dict[Tensor, Any]:
        """The velocities as kept, by parameter: ``u / (1 - buffer_momentum)`` (read ``u`` for the course's)."""
        return self.u.scaled

    def _extra_state(self):
        return {"buffer_momentum": self.u.momentum}

    def _extra_state_problems(self, state_dict):
        value = state_dict.get("buffer_momentum", 0.0)
        try:
            check_number("buffer_momentum", value, low=0, high=1)
        except ValueError as error:
            return [f"{error} (the momentum the momentum buffers are scaled by)"]
        return []

    def _load_extra_state(self, state_dict):
        saved = state_dict.get("buffer_momentum")
        self.u.momentum = float(self.momentum if saved is None else saved)

    def step(self) -> None:
        # NOTE: Python floats keep float32 arrays float32 (numpy 2 / CuPy treat them as weak scalars).
        self._step_out_of_place_where_safe()

    def _step_scalars(self):
        """``(lr, momentum, weight_decay, step)`` of the step about to run, read anew (a changed
        ``lr`` or ``momentum`` takes effect; the velocities are rescaled to a new momentum);
        ``ndl.compile``'s CUDA replay calls it too."""
        lr, momentum, weight_decay = float(self.lr), float(self.momentum), float(self.weight_decay)
        velocities = self.u
        if momentum and velocities.momentum != momentum:
            velocities.rescale(momentum)
        return lr, momentum, weight_decay, lr * (1 - momentum)

    def _update(self, gradients, sources):
        lr, momentum, weight_decay, step = self._step_scalars()
        scaled = self.u.scaled
        updates = {}  # kernels of a device -> that device's updates
        for param, weight, gradient, kernels in gradients:
            if momentum == 0:
                # NOTE: u would equal grad; it is not stored, so no state can alias a .grad array.
                update = (weight, gradient)
            else:
                velocity = scaled.get(param)
                if velocity is None:
                    velocity = scaled[param] = kernels.xp.zeros_like(weight)
                update = (weight, velocity, gradient)
            device_updates = updates.get(kernels)
            if device_updates is None:
                updates[kernels] = [update]
            else:
                device_updates.append(update)
        for kernels, device_updates in updates.items():
            if momentum == 0:
                kernels.sgd_steps(device_updates, lr, weight_decay, self._scratch, sources)
            else:
                # NOTE: v = momentum * v + grad; w -= lr * (1 - momentum) * v, in place.
                kernels.momentum_steps(device_updates, momentum, step, weight_decay, self._scratch, sources)
