"""Softmax cross-entropy's and ReLU's pieces in one pass each, from the C extension ``_fused_ops``.

``ArrayRoutines`` writes the loss, its gradient and ReLU's backward as numpy calls, several per
piece (``logits - logits.max(...)``; the label gather; the gradient's divide, multiply and
indexed subtract; ``out_grad * (out > 0)``). At a small batch each call costs more in dispatch
than in arithmetic. The extension makes each piece one call, with the same operations in the
same order, so the values are bitwise those of the numpy calls (the C file lists them).

Like ``fused_updates``, it is optional: ``pip install`` builds it where a C compiler is found,
and without it (or with ``NEEDLE_FUSED_OPS=0`` in the environment) the routines make the numpy
calls. A kernel returns False, changing nothing, for arrays it does not take, and the routine
then makes the numpy calls too; they raise numpy's errors (a label out of range among them).

A kernel runs through :func:`run`, so that ``ndl.compile`` records it as one step of its plan
while it captures (the compiler sets :data:`CAPTURE_HOOK`); numpy's own calls reach the
recorder through numpy's dispatch, which a C call bypasses.
"""
import os

try:
    from . import _fused_ops
except ImportError:  # not built: no C compiler at install, or a checkout used without installing
    _fused_ops = None

ENABLED = _fused_ops is not None and os.environ.get("NEEDLE_FUSED_OPS", "1") != "0"

shift_rows = _fused_ops.shift_rows if ENABLED else None
take_labels = _fused_ops.take_labels if ENABLED else None
cross_entropy_gradient = _fused_ops.cross_entropy_gradient if ENABLED else None
relu_backward = _fused_ops.relu_backward if ENABLED else None

CAPTURE_HOOK = None
"""While ``ndl.compile`` captures: ``hook(kernel, fresh, args)``, which runs the kernel and records
it (see :func:`run`); None otherwise."""


def run(kernel, fresh, *args):
    """Call ``kernel(*args)``, which writes its first argument: a new array it fills when ``fresh``,
    else an array it updates in place.

    Returns:
        when the kernel ran: ``(first argument,)`` if ``fresh`` (as the capture in progress
        traces it), else ``()``; None when it refused (nothing changed).
    """
    hook = CAPTURE_HOOK
    if hook is not None:
        return hook(kernel, fresh, args)
    if not kernel(*args):
        return None
    return args[:1] if fresh else ()


def describe() -> str:
    """Which routines run, for a benchmark's header."""
    if ENABLED:
        return "fused (C extension)"
    if _fused_ops is None:
        return "numpy calls (the C extension is not built: pip install -e . with a C compiler)"
    return "numpy calls (NEEDLE_FUSED_OPS=0)"
