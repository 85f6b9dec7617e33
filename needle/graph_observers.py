"""Graph observers: diagnostics told what the graph does, per thread, at no cost when none watch.

An observer is an object with any of these methods (:class:`GraphObserver` has them all as no-ops):

- ``node_made(node)``: a graph node was made (in the forward phase, or by a backward() that
  builds gradient graphs);
- ``node_freed_unspent(node, reads_parameter)``: a forward graph node was freed that no
  backward() ever went through; ``reads_parameter`` says whether it read a parameter (an
  ``nn.Parameter``, or a leaf that has a ``.grad``). The node is being finalised: read it, never
  keep it;
- ``backward_started(output)`` and ``backward_finished(output, traversed)``: the backward phase
  of this thread begins and ends (``traversed``: the nodes it went through).

Like grad mode, observers are per thread: an observer added in one thread hears only what that
thread does, so two models trained in two threads do not see each other's nodes.
"""
import threading


class GraphObserver:
    """The observer interface; every method is a no-op, so a subclass defines only what it needs.

    Example:
        >>> import needle as ndl
        >>> class Phases(ndl.graph_observers.GraphObserver):
        ...     def __init__(self):
        ...         self.calls = []
        ...     def backward_started(self, output):
        ...         self.calls.append("started")
        ...     def backward_finished(self, output, traversed):
        ...         self.calls.append(("finished", len(traversed)))
        >>> w = ndl.Tensor([1.0], requires_grad=True)
        >>> phases = Phases()
        >>> ndl.graph_observers.add_observer(phases)
        >>> (w * w).backward()
        >>> ndl.graph_observers.remove_observer(phases)
        >>> phases.calls
        ['started', ('finished', 2)]
    """

    def node_made(self, node):
        """A graph node was made."""

    def node_freed_unspent(self, node, reads_parameter):
        """A forward graph node that no backward() used is being freed."""

    def backward_started(self, output):
        """This thread's backward() from ``output`` begins."""

    def backward_finished(self, output, traversed):
        """This thread's backward() from ``output`` ended, having gone through ``traversed``."""


class _ThreadState(threading.local):
    in_backward = False  # True while this thread runs a backward()
    observers = ()  # this thread's observers, a tuple (replaced, never mutated)


THREAD = _ThreadState()
_observing_threads = [0]  # how many observers exist over all threads (the process-wide switch)
_switch_hooks = []  # called with True/False when the first observer arrives / the last leaves


def in_backward():
    """Whether this thread is running a backward() now (gradient graphs are being built).

    Example:
        >>> import needle as ndl
        >>> ndl.graph_observers.in_backward()
        False
    """
    return THREAD.in_backward


def add_observer(observer):
    """Tell ``observer`` what this thread's graph does from now on, until removed."""
    THREAD.observers = THREAD.observers + (observer,)
    _observing_threads[0] += 1
    if _observing_threads[0] == 1:
        for hook in _switch_hooks:
            hook(True)


def remove_observer(observer):
    """Stop telling ``observer`` (added in this thread); unknown observers are ignored."""
    observers = THREAD.observers
    if not any(o is observer for o in observers):
        return
    index = next(i for i, o in enumerate(observers) if o is observer)
    THREAD.observers = observers[:index] + observers[index + 1 :]
    _observing_threads[0] -= 1
    if _observing_threads[0] == 0:
        for hook in _switch_hooks:
            hook(False)


def observing():
    """Whether any thread has an observer (the observed, slower node path is in use)."""
    return _observing_threads[0] > 0
