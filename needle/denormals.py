"""``set_flush_denormal``: treat subnormal floats as zero on the CPU, PyTorch's switch of that name.

A subnormal (denormal) float is one smaller in magnitude than the smallest normal number
(about 1.2e-38 in float32). x86 CPUs compute with them through a slow microcode path, tens to
hundreds of times slower than ordinary arithmetic. Training makes them on its own: as a network
grows confident its softmax gives probabilities of 1e-39 and below, those flow into the
gradients, and momentum decays a velocity that no longer gets any gradient through every
subnormal on its way to zero. On the benchmark MLP at H=128, batch 32, one epoch leaves about
3,500 of its 101,770 velocities subnormal, and flushing made an epoch take 0.81x the IEEE time
for the hand-written numpy floor and 0.84-0.91x for needle's three paths (docs/benchmarks.md,
"Subnormal floats"; at H=512, batch 128, an epoch makes none and flushing changes nothing).

Flushing trades the last bits of numbers below 1.2e-38 (they become 0) for that time, which no
training result depends on. Like PyTorch (and unlike TensorFlow, which flushes by default),
needle keeps IEEE arithmetic unless asked: the mode belongs to the thread, so it changes every
numpy computation in it, needle's or not.

The mode is the calling thread's CPU control register (x86 MXCSR's FTZ and DAZ bits, AArch64
FPCR's FZ bit): numpy and a one-thread BLAS running in that thread follow it, and threads
started afterwards inherit it; BLAS worker threads started before the call keep their own.
It does not affect CUDA.

Example:
    >>> import numpy as np, needle as ndl
    >>> previous = ndl.is_flush_denormal_enabled()
    >>> tiny = np.float32(1e-39)                        # a float32 subnormal
    >>> if ndl.set_flush_denormal(True):
    ...     assert float(tiny * np.float32(1)) == 0.0   # read as zero
    >>> _ = ndl.set_flush_denormal(False)
    >>> float(tiny * np.float32(1)) > 0                 # IEEE again
    True
    >>> _ = ndl.set_flush_denormal(previous)
"""
import numpy

try:
    from . import _denormals
except ImportError:  # not built: no C compiler at install, or a checkout used without installing
    _denormals = None


def set_flush_denormal(mode: bool) -> bool:
    """Flush subnormal floats to zero in this thread's CPU arithmetic (``True``), or keep them (``False``).

    Args:
        mode: ``True`` to flush (results that would be subnormal become 0, subnormal inputs
            are read as 0), ``False`` for IEEE arithmetic, the default.

    Returns:
        True when the mode was set; False, with nothing changed, where it cannot be set (a CPU
        other than x86-64 or AArch64, or needle installed without its C extensions). As in
        PyTorch, ``set_flush_denormal(False)`` also returns False there.

    Raises:
        TypeError: ``mode`` is not a bool.
    """
    if not isinstance(mode, (bool, numpy.bool_)):
        raise TypeError(
            f"set_flush_denormal(mode) takes True (flush subnormal floats to zero) or False (IEEE "
            f"arithmetic); got {type(mode).__name__} {mode!r}"
        )
    if _denormals is None:
        return False
    return _denormals.set_flush(bool(mode))


def is_flush_denormal_enabled() -> bool:
    """Whether this thread's CPU arithmetic flushes subnormal floats to zero (see :func:`set_flush_denormal`)."""
    return _denormals is not None and _denormals.flushing()
