"""Which parameters some live optimizer updates: a weak registry the optimizers fill.

Every :class:`~needle.optim.Optimizer` registers its parameters when it is made and leaves the
registry when it is garbage collected; every step is counted (``steps()``), so that a loop in
which no optimizer steps (a lesson's hand-written update) is never said to train a frozen model. ``backward()`` uses it to count gradients computed for
parameters that no live optimizer updates (``snapshot().frozen_gradients``): a frozen model run
with grad mode on, whose graph a backward() goes through for nothing. While no optimizer exists
(plain autograd), nothing is counted.

Example:
    >>> import needle as ndl
    >>> from needle import updated_parameters
    >>> w, frozen = ndl.nn.Parameter(ndl.Tensor([1.0])), ndl.nn.Parameter(ndl.Tensor([2.0]))
    >>> opt = ndl.optim.SGD([w], lr=0.1)
    >>> updated_parameters.is_updated(w), updated_parameters.is_updated(frozen)
    (True, False)
    >>> del opt
    >>> updated_parameters.is_updated(w)
    False
"""
import weakref

_UPDATERS = {}  # id(parameter) -> how many live optimizers update it (an optimizer keeps its parameters alive)
_LIVE_OPTIMIZERS = [0]
_STEPS = [0]  # optimizer steps taken, over all optimizers (cumulative)


def register(optimizer, params):
    """Note that ``optimizer`` updates ``params`` until it is garbage collected."""
    ids = [id(p) for p in params]
    for key in ids:
        _UPDATERS[key] = _UPDATERS.get(key, 0) + 1
    _LIVE_OPTIMIZERS[0] += 1
    weakref.finalize(optimizer, _unregister, ids)


def _unregister(ids):
    _LIVE_OPTIMIZERS[0] -= 1
    for key in ids:
        left = _UPDATERS.get(key, 0) - 1
        if left > 0:
            _UPDATERS[key] = left
        else:
            _UPDATERS.pop(key, None)


def is_updated(param):
    """Whether some live optimizer updates ``param``."""
    return id(param) in _UPDATERS


def any_optimizer():
    """Whether any optimizer is alive."""
    return _LIVE_OPTIMIZERS[0] > 0


def count_step():
    """Note one optimizer step (called by ``Optimizer._gradients``, which every step reads)."""
    _STEPS[0] += 1


def steps():
    """How many optimizer steps were taken so far, by all optimizers."""
    return _STEPS[0]
