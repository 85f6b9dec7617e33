"""What ``Trainer.fit`` expects of its loader, model and loss function, checked where each value enters.

A loader must be iterable and yield ``(X, y)`` pairs of Tensors; the model's forward must return
one Tensor (the logits) computed from its parameters; the loss function must return a scalar
Tensor that depends on them. Each check runs before the optimizer step that would use the value,
and a ``FitContractError`` raised before the fit's first step is undone by ``FitRollback``: the
model's buffers (e.g. BatchNorm statistics updated by the forward), numpy's random state (which
a shuffling loader drew from) and the trainer's epoch position return to what they were, so the
failed ``fit`` changes nothing: the next ``fit`` gives what it would have given without it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import needle

_FORWARD_CONTRACT = (
    "a model's forward must return one needle Tensor of logits computed from its parameters "
    "(through needle ops on them), so that loss.backward() reaches every parameter"
)


class FitContractError(TypeError):
    """A loader, model or loss function handed ``fit`` something it cannot train on."""


def check_loader(loader: Any, name: str = "train_loader") -> None:
    """Refuse a ``loader`` that cannot be iterated (``None``, a number, a single Tensor)."""
    iterable = hasattr(loader, "__iter__") or hasattr(loader, "__getitem__")  # iter() would draw a shuffle
    if loader is None or isinstance(loader, (needle.Tensor, np.ndarray, str, bytes)) or not iterable:
        raise FitContractError(
            f"fit: {name} must be an iterable of (X, y) batches, e.g. needle.data.DataLoader(dataset, "
            f"batch_size=64); got {type(loader).__name__}"
        )


def checked_batch(batch: Any, index: int, name: str = "train_loader") -> tuple:
    """``(X, y)`` from one ``batch`` of the loader, or an error saying what it yielded instead."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise FitContractError(
            f"fit: {name} batch {index} is {_describe(batch)}; expected an (X, y) pair of Tensors "
            "(inputs and labels). A dataset's __getitem__ should return (x, y); a loader that yields "
            "more (e.g. (X, y, weights)) needs a custom Trainer.train_step"
        )
    for value, what in zip(batch, ("X", "y")):
        if not isinstance(value, needle.Tensor):
            raise FitContractError(
                f"fit: {name} batch {index} has {what} of type {type(value).__name__}; expected needle Tensors "
                "(needle.data.DataLoader makes them; wrap the data with ndl.Tensor(array) in the loader)"
            )
    return batch[0], batch[1]


def check_logits(logits: Any) -> None:
    """Refuse a forward result that is not one Tensor."""
    if isinstance(logits, needle.Tensor):
        return
    if isinstance(logits, (tuple, list, needle.autograd.TensorTuple)):
        got = f"a {type(logits).__name__} of {len(logits)}"
        fix = "return the logits only (a sequence model's (output, state) needs a wrapper that drops the state)"
    else:
        got = type(logits).__name__
        fix = "compute the result with needle ops on the model's parameters instead of numpy"
    raise FitContractError(f"fit: the model's forward returned {got}; {_FORWARD_CONTRACT}: {fix}")


def check_loss(loss: Any) -> None:
    """Refuse a loss that is not a scalar Tensor depending on the model's parameters."""
    if not isinstance(loss, needle.Tensor):
        raise FitContractError(
            f"fit: loss_fn returned {type(loss).__name__}; it must return a scalar needle Tensor, "
            "e.g. needle.nn.SoftmaxLoss()(logits, y)"
        )
    if int(np.prod(loss.shape)) != 1:
        raise FitContractError(
            f"fit: loss_fn returned a Tensor of shape {loss.shape}; it must return a scalar (one number): "
            "reduce it, e.g. ndl.ops.summation(losses) / batch_size (needle.nn.SoftmaxLoss already averages)"
        )
    if not loss.requires_grad and not needle.is_grad_enabled():
        raise FitContractError(
            "fit: the loss has no graph because fit ran under needle.no_grad(); call fit outside no_grad"
        )
    if not loss.requires_grad:
        raise FitContractError(
            f"fit: the loss does not depend on any parameter (requires_grad is False), so training cannot "
            f"change it; {_FORWARD_CONTRACT}, not a Tensor made from numpy values"
        )


class FitRollback:
    """What a ``fit`` may have touched before its first optimizer step, to put back on a FitContractError."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.global_step = trainer.global_step
        self.position = trainer._position
        self.random_state = np.random.get_state()
        # NOTE: only buffers: no parameter changes before the first optimizer step, but a forward
        # updates buffers such as BatchNorm's running statistics (a copy of those costs little).
        named_buffers = getattr(trainer.model, "named_buffers", None)
        self.buffers = {name: tensor.numpy().copy() for name, tensor in named_buffers()} if callable(named_buffers) else {}

    def undo(self, error: BaseException) -> None:
        """Restore the saved state if ``error`` is a FitContractError raised before any step of this fit."""
        if not isinstance(error, FitContractError) or self.trainer.global_step != self.global_step:
            return
        if self.buffers:
            self.trainer.model.load_state_dict(self.buffers, strict=False)
        self.trainer._position = self.position
        np.random.set_state(self.random_state)


def _describe(batch: Any) -> str:
    if isinstance(batch, (tuple, list)):
        kinds = ", ".join(type(item).__name__ for item in batch)
        return f"a {type(batch).__name__} of {len(batch)} ({kinds})"
    shape = getattr(batch, "shape", None)
    return f"a {type(batch).__name__}" + (f" of shape {shape}" if shape is not None else "")
