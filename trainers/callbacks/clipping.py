"""``GradientClipping``: clip the gradients' joint norm before every optimizer step, as a callback."""
from needle.optim import clip_grad_norm

from .base import Callback


class GradientClipping(Callback):
    """Before each optimizer step, scale the model's gradients so that their joint 2-norm is at most
    ``max_norm`` (``needle.optim.clip_grad_norm``). ``Trainer(gradient_clip_val=...)`` adds one.

    Args:
        max_norm: the largest allowed total norm (> 0).

    Attributes:
        last_norm: the total norm before clipping at the latest step (None before the first).

    Example:
        >>> GradientClipping(1.0).max_norm
        1.0
    """

    def __init__(self, max_norm: float):
        if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
            raise ValueError(f"gradient clipping needs max_norm > 0 (a number); got max_norm={max_norm!r}")
        self.max_norm = float(max_norm)
        self.last_norm = None

    def on_before_optimizer_step(self, trainer, optimizer):
        self.last_norm = clip_grad_norm(trainer.model.parameters(), self.max_norm)
