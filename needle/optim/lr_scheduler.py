"""Learning-rate schedules (PyTorch's ``torch.optim.lr_scheduler`` names): ``StepLR``,
``CosineAnnealingLR`` and ``LambdaLR``, stepped once per epoch.

A scheduler remembers the optimizer's learning rate when it is made (``base_lr``) and, on every
``step()``, sets ``optimizer.lr`` to the schedule's value for the next epoch. As in PyTorch the
constructor takes the first step (epoch 0), so ``get_last_lr()`` is the rate the first epoch
uses. ``Trainer(..., lr_scheduler=scheduler)`` steps it after every epoch and keeps its
position in checkpoints.

Example:
    >>> import needle as ndl
    >>> w = ndl.nn.Parameter(ndl.init.ones(2))
    >>> opt = ndl.optim.SGD([w], lr=0.1)
    >>> schedule = ndl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> rates = []
    >>> for epoch in range(5):
    ...     rates.append(round(opt.lr, 4))   # train one epoch here
    ...     schedule.step()
    >>> rates
    [0.1, 0.1, 0.05, 0.05, 0.025]
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from .optimizer import check_number

__all__ = ["CosineAnnealingLR", "LRScheduler", "LambdaLR", "StepLR"]


class LRScheduler:
    """Base class: a subclass defines ``lr_at(epoch)``, the rate for epoch ``epoch`` (from 0).

    Args:
        optimizer: a needle optimizer (anything with a numeric ``lr`` attribute).
        last_epoch: -1 to start a new schedule (the only value accepted: to resume, use
            ``load_state_dict``).
    """

    hyperparameter_names: tuple[str, ...] = ()

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        name = type(self).__name__
        lr = getattr(optimizer, "lr", None)
        if not isinstance(lr, numbers.Real) or isinstance(lr, bool):
            raise TypeError(f"{name} needs a needle optimizer with a learning rate (opt.lr); got {optimizer!r}")
        if last_epoch != -1:
            raise ValueError(
                f"{name}(last_epoch={last_epoch!r}): only -1 (a new schedule) is supported; to resume a "
                f"schedule, build it with last_epoch=-1 and call scheduler.load_state_dict(saved_state)"
            )
        self.optimizer = optimizer
        self.base_lr = float(lr)
        self.last_epoch = -1
        self.step()

    def lr_at(self, epoch: int) -> float:
        raise NotImplementedError

    def step(self) -> None:
        """Move to the next epoch and set ``optimizer.lr`` to its rate."""
        lr = self.lr_at(self.last_epoch + 1)
        self.last_epoch += 1
        self.optimizer.lr = self._last_lr = lr

    def get_last_lr(self) -> list[float]:
        """The rate set by the last ``step()``, as a one-element list (PyTorch lists one per group)."""
        return [self._last_lr]

    def state_dict(self) -> dict[str, Any]:
        """The schedule's position and settings (a ``LambdaLR``'s function is not saved)."""
        return {
            "scheduler": type(self).__name__,
            "last_epoch": self.last_epoch,
            "base_lr": self.base_lr,
            **{name: getattr(self, name) for name in self.hyperparameter_names},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` of the same kind of scheduler; all or nothing.

        ``optimizer.lr`` is set to the restored epoch's rate.

        Raises:
            TypeError, ValueError: naming what does not fit (nothing is changed).
        """
        name = type(self).__name__
        if not isinstance(state, dict):
            raise TypeError(f"{name}.load_state_dict needs the dict that scheduler.state_dict() returned; got {type(state).__name__}")
        if state.get("scheduler", name) != name:
            raise ValueError(f"{name}.load_state_dict: the state was saved by {state.get('scheduler')}; build that scheduler instead")
        missing = [key for key in ("last_epoch", "base_lr", *self.hyperparameter_names) if key not in state]
        if missing:
            raise ValueError(f"{name}.load_state_dict: the state lacks {missing}; nothing was loaded")
        epoch = state["last_epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
            raise ValueError(f"{name}.load_state_dict: last_epoch must be an int >= 0, got {epoch!r}")
        base_lr = check_number("base_lr", state["base_lr"], low=0)
        settings = self._checked_settings(**{key: state[key] for key in self.hyperparameter_names})
        before = self.base_lr, {key: getattr(self, key) for key in settings}
        self.base_lr = base_lr
        for key, value in settings.items():
            setattr(self, key, value)
        try:
            lr = self.lr_at(int(epoch))
        except BaseException:  # e.g. a LambdaLR whose function refuses that epoch
            self.base_lr = before[0]
            for key, value in before[1].items():
                setattr(self, key, value)
            raise
        self.last_epoch = int(epoch)
        self.optimizer.lr = self._last_lr = lr

    def _checked_settings(self, **settings: Any) -> dict[str, Any]:
        return settings

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.hyperparameter_names)
        return f"{type(self).__name__}({settings}, last_epoch={self.last_epoch}, lr={self.get_last_lr()[0]:g})"


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs: ``base_lr * gamma ** (epoch // step_size)``.

    Args:
        optimizer: the optimizer whose ``lr`` to set.
        step_size: epochs between decays (an int >= 1).
        gamma: the factor (> 0; default 0.1).
    """

    hyperparameter_names = ("step_size", "gamma")

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        settings = self._checked_settings(step_size=step_size, gamma=gamma)
        self.step_size, self.gamma = settings["step_size"], settings["gamma"]
        super().__init__(optimizer, last_epoch)

    def _checked_settings(self, step_size, gamma):
        if isinstance(step_size, bool) or not isinstance(step_size, numbers.Integral) or step_size < 1:
            raise ValueError(f"StepLR step_size must be an int >= 1 (epochs between decays), got {step_size!r}")
        gamma = check_number("gamma", gamma, low=0)
        if gamma == 0:
            raise ValueError("StepLR gamma must be > 0 (0 would stop training after the first decay), got gamma=0.0")
        return {"step_size": int(step_size), "gamma": gamma}

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` epochs:
    ``eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2`` (SGDR without restarts).

    Args:
        optimizer: the optimizer whose ``lr`` to set.
        T_max: epochs of one half cosine (an int >= 1).
        eta_min: the lowest rate (>= 0; default 0).
    """

    hyperparameter_names = ("T_max", "eta_min")

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        settings = self._checked_settings(T_max=T_max, eta_min=eta_min)
        self.T_max, self.eta_min = settings["T_max"], settings["eta_min"]
        super().__init__(optimizer, last_epoch)

    def _checked_settings(self, T_max, eta_min):
        if isinstance(T_max, bool) or not isinstance(T_max, numbers.Integral) or T_max < 1:
            raise ValueError(f"CosineAnnealingLR T_max must be an int >= 1 (epochs to anneal over), got {T_max!r}")
        return {"T_max": int(T_max), "eta_min": check_number("eta_min", eta_min, low=0)}

    def lr_at(self, epoch: int) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LambdaLR(LRScheduler):
    """The rate is ``base_lr * lr_lambda(epoch)``.

    Args:
        optimizer: the optimizer whose ``lr`` to set.
        lr_lambda: a function of the epoch (an int from 0) returning a finite factor >= 0.
    """

    def __init__(self, optimizer: Any, lr_lambda: Callable[[int], float], last_epoch: int = -1) -> None:
        if not callable(lr_lambda):
            raise TypeError(f"LambdaLR lr_lambda must be a function of the epoch, got {lr_lambda!r}")
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> float:
        factor = self.lr_lambda(epoch)
        return self.base_lr * check_number(f"lr_lambda({epoch})", factor, low=0)
