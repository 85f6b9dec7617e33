"""The per-Value bookkeeping in C, where the extension ``needle._value_bookkeeping`` is built.

Every Value sets its fields, bumps the live counters and holds its array's buffer when it is
made (``autograd._fill``), and undoes that when it is freed (``Value.__del__``). In Python that
is about 160 bytecodes a Value; a training step of the benchmark MLP makes 10 (fast path) to 16
(course ``backward()``) of them, and inside a training loop each bytecode costs about 45 ns
(docs/benchmarks.md, "Where the small-size gap is"). :func:`install` replaces the two with the
C functions, which do the same work on the same state: the counters stay ``autograd``'s
module globals, the tokens ``live_buffers``', and the rare cases call the Python functions that
own them (``live_buffers.hold`` for a view or a tuple, ``_count_unspent_freed``, a graph
keeper's ``keep_recipe``).

Optional, as the fused updates are: without a C compiler at install the Python versions run.
``NEEDLE_C_BOOKKEEPING=0`` in the environment keeps them too, to compare the two.
"""
import os

import numpy

from . import live_buffers
from .backend_ndarray import NDArray

try:
    from . import _value_bookkeeping
except ImportError:  # not built: no C compiler at install, or a checkout used without installing
    _value_bookkeeping = None

ENABLED = _value_bookkeeping is not None and os.environ.get("NEEDLE_C_BOOKKEEPING", "1") != "0"


def install(autograd) -> bool:
    """Run ``autograd``'s ``_fill`` and ``Value.__del__`` in C; False (nothing changed) without the extension."""
    if not ENABLED:
        return False
    _value_bookkeeping.configure(
        vars(autograd), live_buffers._HELD, live_buffers.BYTES_BY_DEVICE, autograd.GRAPH_KEEPERS, NDArray,
        numpy.ndarray, live_buffers.hold, live_buffers.hold_all, live_buffers.release, autograd._count_unspent_freed,
    )
    release_value = _value_bookkeeping.release_value

    def __del__(self):
        release_value(self)

    autograd._fill = _value_bookkeeping.fill
    autograd.Value.__del__ = __del__
    return True


def describe() -> str:
    """Which bookkeeping runs, for a benchmark's header."""
    if ENABLED:
        return "C extension"
    if _value_bookkeeping is None:
        return "Python (the C extension is not built: pip install -e . with a C compiler)"
    return "Python (NEEDLE_C_BOOKKEEPING=0)"
