"""The matrix product of two raw arrays: the one place every op multiplies matrices.

It is ``a @ b``, except in the thread that ``needle.compiler.cuda_graph`` is capturing a step
into a CUDA graph: CuPy refuses cuBLAS during a stream capture, so for that time and thread
:func:`capturing` installs the same cuBLAS call made directly
(:class:`needle.backend_ndarray.captured_gemm.CapturedGemm`). Other threads keep ``a @ b``.
"""
import contextlib
import threading

_CAPTURE = None  # (thread id, product) while a thread captures, else None
_CLAIM = threading.Lock()  # held for a capture: two threads cannot both install theirs


class ConcurrentCapture(RuntimeError):
    """Raised by :func:`capturing` while another thread captures."""


def matmul(a, b):
    """``a @ b`` of raw numpy or CuPy arrays (in a capturing thread, the capturable cuBLAS call)."""
    capture = _CAPTURE
    if capture is not None and capture[0] == threading.get_ident():
        return capture[1](a, b)
    return a @ b


@contextlib.contextmanager
def capturing(product):
    """Within the block, this thread's products are ``product(a, b)``."""
    global _CAPTURE
    if not _CLAIM.acquire(blocking=False):
        raise ConcurrentCapture("ndl.compile: another thread is capturing a CUDA graph (one capture at a time)")
    _CAPTURE = (threading.get_ident(), product)
    try:
        yield
    finally:
        _CAPTURE = None
        _CLAIM.release()
