"""The SGD and Adam updates in one pass over the arrays, from the C extension ``_fused_updates``.

``ArrayRoutines`` writes an update as in-place numpy calls, each a pass over weight-sized arrays
(momentum SGD takes four, Adam eleven, with a scratch for the products). The extension does the same
arithmetic element by element in one pass, each operation rounded as the numpy call rounds it,
so the values are bitwise equal and a fused step, an unfused one and a compiled replay agree.

``pip install`` builds the extension (setup.py); it is optional, so where no C compiler is found
the install succeeds and every update runs as numpy calls. ``NEEDLE_FUSED_UPDATES=0`` in the
environment turns it off, to compare the two (benchmarks/mnist_mlp.py's figures name which ran).

``momentum_step``, ``sgd_step`` and ``adam_step`` are None without the extension; each returns False, changing
nothing, for arrays it does not take (not C-contiguous float32/float64 buffers of one size, or
sharing memory; CuPy arrays), and the caller then makes the numpy calls.

One difference from the numpy calls besides speed: an update that overflows or makes a NaN does
so silently, as PyTorch's does; numpy would also warn (or raise under ``np.errstate(all="raise")``).
The values, NaNs and infinities included, are the same.
"""
import os

try:
    from . import _fused_updates
except ImportError:  # not built: no C compiler at install, or a checkout used without installing
    _fused_updates = None

ENABLED = _fused_updates is not None and os.environ.get("NEEDLE_FUSED_UPDATES", "1") != "0"

momentum_step = _fused_updates.momentum_step if ENABLED else None
sgd_step = _fused_updates.sgd_step if ENABLED else None
adam_step = _fused_updates.adam_step if ENABLED else None


def describe() -> str:
    """Which update ran, for a benchmark's header: ``"fused (C extension)"`` or why numpy calls."""
    if ENABLED:
        return "fused (C extension)"
    if _fused_updates is None:
        return "numpy calls (the C extension is not built: pip install -e . with a C compiler)"
    return "numpy calls (NEEDLE_FUSED_UPDATES=0)"
