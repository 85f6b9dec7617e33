"""Adam, with the course's bias correction and weight decay."""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..backend_ndarray.kernels import AdamScalars
from .optimizer import Optimizer, check_number

if TYPE_CHECKING:
    from ..autograd import Tensor


class Adam(Optimizer):
    """Adam as the course defines it (``t`` counts steps, starting at 1)::

        grad = p.grad + weight_decay * p
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad ** 2
        p = p - lr * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)) ** 0.5 + eps)

    Parameters are updated in place; parameters whose ``.grad`` is None are skipped.

    Args:
        params: the parameters to update.
        lr: learning rate (>= 0).
        beta1, beta2: decay rates of the moment estimates, each in [0, 1).
        eps: added to the denominator (>= 0).
        weight_decay: L2 penalty (>= 0).

    Example:
        >>> import needle as ndl
        >>> w = ndl.nn.Parameter(ndl.Tensor([1.0]))
        >>> w.grad = ndl.Tensor([3.0])
        >>> ndl.optim.Adam([w], lr=0.1).step()
        >>> round(w.numpy().item(), 4)
        0.9
    """

    state_names = ("m", "v")
    hyperparameter_names = ("lr", "beta1", "beta2", "eps", "weight_decay")
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params)
        self._set_hyperparameters(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
        self.t = 0
        self.m = {}
        self.v = {}

    def _checked(self, lr, beta1, beta2, eps, weight_decay):
        return {
            "lr": check_number("lr", lr, low=0),
            "beta1": check_number("beta1", beta1, low=0, high=1),
            "beta2": check_number("beta2", beta2, low=0, high=1),
            "eps": check_number("eps", eps, low=0),
            "weight_decay": check_number("weight_decay", weight_decay, low=0),
        }

    def _extra_state(self):
        return {"t": self.t}

    def _extra_state_problems(self, state_dict):
        t = state_dict.get("t")
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0:
            return [f"t (the number of steps taken) must be an int >= 0, got t={t!r}"]
        return []

    def _load_extra_state(self, state_dict):
        self.t = int(state_dict["t"])

    def _next_step_scalars(self) -> AdamScalars:
        """Count one more step (``t``) and give the kernels its scalars, bias corrections included.

        Read anew at every step, so a changed ``lr`` or beta takes effect (``ndl.compile``'s replay calls it too).
        """
        self.t += 1
        return self._scalars_at(self.t)

    def _scalars_at(self, t) -> AdamScalars:
        """The kernels' scalars of step ``t`` with the hyperparameters as they are now (changes nothing)."""
        lr, beta1, beta2 = float(self.lr), float(self.beta1), float(self.beta2)
        eps, weight_decay = float(self.eps), float(self.weight_decay)
        return AdamScalars(
            beta1, beta2, eps, weight_decay,
            step_size=lr / (1 - beta1**t),
            inverse_sqrt_c2=1 / math.sqrt(1 - beta2**t),
        )

    def step(self) -> None:
        self._step_out_of_place_where_safe()

    def _update(self, gradients, sources):
        hyper = self._next_step_scalars()
        firsts, seconds = self.m, self.v
        updates = {}  # kernels of a device -> that device's updates
        for param, weight, gradient, kernels in gradients:
            first = firsts.get(param)
            if first is None:
                first = firsts[param] = kernels.xp.zeros_like(weight)
                seconds[param] = kernels.xp.zeros_like(weight)
            updates.setdefault(kernels, []).append((weight, first, seconds[param], gradient))
        for kernels, device_updates in updates.items():
            kernels.adam_steps(device_updates, hyper, self._scratch, sources)
