"""Optimizers (the course's ``needle.optim``): SGD, Adam, gradient clipping, and ``lr_scheduler``."""
from .adam import Adam
from .clip import clip_grad_norm
from .optimizer import Optimizer
from .sgd import SGD
from . import lr_scheduler

__all__ = ["Adam", "Optimizer", "SGD", "clip_grad_norm", "lr_scheduler"]
