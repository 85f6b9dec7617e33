"""Optimizers (the course's ``needle.optim``): SGD, Adam, and gradient clipping."""
from .adam import Adam
from .clip import clip_grad_norm
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "Optimizer", "SGD", "clip_grad_norm"]
