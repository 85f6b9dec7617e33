"""Weight initialisers: Xavier (Glorot) and Kaiming (He), uniform and normal.

Each draws a (fan_in, fan_out) tensor unless ``shape`` is given, which replaces it (the fans
still set the scale). Each takes the course's keywords ``device``, ``dtype`` and
``requires_grad`` (passed to ``rand``/``randn``); any other keyword is a TypeError naming it.
"""
import math

from .init_basic import rand, randn


def _gain(nonlinearity):
    if nonlinearity != "relu":
        raise ValueError(f"only nonlinearity='relu' is supported, got {nonlinearity!r}")
    return math.sqrt(2)


def xavier_uniform(fan_in, fan_out, gain=1.0, shape=None, *, device=None, dtype="float32", requires_grad=False):
    """Uniform in [-a, a] with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    bound = gain * math.sqrt(6 / (fan_in + fan_out))
    return rand(
        *(shape or (fan_in, fan_out)), low=-bound, high=bound,
        device=device, dtype=dtype, requires_grad=requires_grad,
    )


def xavier_normal(fan_in, fan_out, gain=1.0, shape=None, *, device=None, dtype="float32", requires_grad=False):
    """Normal with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    std = gain * math.sqrt(2 / (fan_in + fan_out))
    return randn(
        *(shape or (fan_in, fan_out)), mean=0.0, std=std,
        device=device, dtype=dtype, requires_grad=requires_grad,
    )


def kaiming_uniform(fan_in, fan_out, shape=None, nonlinearity="relu", *, device=None, dtype="float32", requires_grad=False):
    """Uniform in [-b, b] with ``b = sqrt(2) * sqrt(3 / fan_in)`` (for ReLU).

    Example:
        >>> import needle as ndl
        >>> ndl.init.kaiming_uniform(4, 3).shape
        (4, 3)
    """
    bound = _gain(nonlinearity) * math.sqrt(3 / fan_in)
    return rand(
        *(shape or (fan_in, fan_out)), low=-bound, high=bound,
        device=device, dtype=dtype, requires_grad=requires_grad,
    )


def kaiming_normal(fan_in, fan_out, shape=None, nonlinearity="relu", *, device=None, dtype="float32", requires_grad=False):
    """Normal with ``std = sqrt(2) / sqrt(fan_in)`` (for ReLU)."""
    std = _gain(nonlinearity) / math.sqrt(fan_in)
    return randn(
        *(shape or (fan_in, fan_out)), mean=0.0, std=std,
        device=device, dtype=dtype, requires_grad=requires_grad,
    )
