"""The backward passes' walks over the graph in C, from the optional extension ``_backward_walk``.

A backward pass spends most of its Python time on bookkeeping per node, not on arrays: the
depth-first search of :func:`needle.backward._checked_nodes`, the loop that takes each node's
gradient out of a table, checks its dtype, calls the op's ``gradient_data`` and files the
results under the inputs (:func:`needle.backward.compute_gradient_data` for
``backward(create_graph=False)``, :func:`needle.backward.compute_gradient_of_variables` for the
course's ``backward()``, whose loop also gives constants their gradients), and the count of the
nodes it spent. The extension does the same in C: the same order, the same checks and the same calls, reading every
attribute as Python reads it and summing gradients with the same Python function, so the results are
those of the Python loops (tests/test_backward_walk.py holds them to it). The ops' own work
stays in Python.

It is optional, like ``fused_ops``: ``pip install`` builds it where a C compiler is found;
without it, or with ``NEEDLE_BACKWARD_WALK=0`` in the environment, the Python loops run.
A graph with a TensorTuple, or an op that reads one item of one, always takes the Python loop.
"""
import os

from .autograd import Value  # NOTE: imported by needle.backward, which autograd imports once Value is defined
from .backend_ndarray import NDArray

try:
    from . import _backward_walk
except ImportError:  # not built: no C compiler at install, or a checkout used without installing
    _backward_walk = None

ENABLED = _backward_walk is not None and os.environ.get("NEEDLE_BACKWARD_WALK", "1") != "0"

if _backward_walk is not None:
    _backward_walk.configure(NDArray, Value)

checked_order = _backward_walk.checked_order if ENABLED else None
"""``checked_order(root, prune_constants) -> (order, stale, plain)``, or None without the extension."""

gradient_pass = _backward_walk.gradient_pass if ENABLED else None
"""``gradient_pass(order, output, out_grad, make_leaf_grad, add_grads, cast_arriving)``, or None."""

course_pass = _backward_walk.course_pass if ENABLED else None
"""``course_pass(order, output, out_grad, add_grads, cast_arriving, takes_constant_gradient)``:
the course ``backward()``'s loop, returning ``[(node, gradient)]``; or None."""

leaves_requiring_grad = _backward_walk.leaves_requiring_grad if ENABLED else None
"""``leaves_requiring_grad(order) -> [node]``: the leaves of ``order`` that require grad; or None."""

assign_course_grads = _backward_walk.assign_course_grads if ENABLED else None
"""``assign_course_grads(arrived, output, seed, seed_tensor, leaf_grad_op, gradient_tensor, detached,
DeferredGradient)``: :func:`needle.backward._assign_arrived` in C; or None."""

count_spent = _backward_walk.count_spent if ENABLED else None
"""``count_spent(nodes, updaters) -> (marked, frozen)``: autograd's ``_count_backward_call`` loop; or None."""



def describe() -> str:
    """Which walk runs, for a benchmark's header."""
    if ENABLED:
        return "C (extension _backward_walk)"
    if _backward_walk is None:
        return "Python (the C extension is not built: pip install -e . with a C compiler)"
    return "Python (NEEDLE_BACKWARD_WALK=0)"
