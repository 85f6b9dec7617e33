"""``manual_seed``: one call that seeds every random draw needle makes."""
import numpy

_MAX_SEED = 2**32 - 1  # numpy's legacy global generator takes seeds in [0, 2**32)


def manual_seed(seed: int) -> None:
    """Seed everything needle draws from, as ``torch.manual_seed`` does for PyTorch.

    needle draws every random number (initializers, ``Dropout`` masks, ``DataLoader`` shuffles,
    random transforms, on every device) from numpy's global generator on the host, so this is
    ``numpy.random.seed(seed)``; the course's seeded reference values follow from it.

    Args:
        seed: an int in [0, 2**32 - 1].

    Raises:
        TypeError: ``seed`` is not an int. ValueError: it is out of that range.

    Example:
        >>> import needle as ndl
        >>> ndl.manual_seed(0)
        >>> first = ndl.init.rand(3).numpy()
        >>> ndl.manual_seed(0)
        >>> bool((ndl.init.rand(3).numpy() == first).all())
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, numpy.integer)):
        raise TypeError(f"manual_seed takes an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"manual_seed: seed must be in [0, {_MAX_SEED}] (numpy's range), got {seed}")
    numpy.random.seed(int(seed))
