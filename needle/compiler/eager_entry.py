"""A signature that ``ndl.compile`` runs eagerly: its step ran correctly but cannot be replayed."""
from .capture import _detached
from .state import keep_replaced_tensors, read_slots


class EagerEntry:
    """Calls ``fn`` eagerly each time, returning its results without a graph, as a replay does.

    Kept in place of a plan for a signature whose capture fell back
    (:class:`~needle.compiler.errors.EagerFallback`); the fallback warned once, at that capture.
    ``slots`` are the state's (owner, attribute) pairs: tensors the call replaces (BatchNorm's
    running statistics) are given back holding the new values, as a capture does.
    """

    expected_slots = ()  # no state to check before a call (ready() is always True)
    replays_a_plan = False  # its calls do not count as replays
    attribute_writes = ()  # (owner, name, value) a call sets before its replay: what its capture set (CompiledFunction)

    def __init__(self, fn, reason, last_result, slots, keeps_graph=False):
        self.fn = fn
        self.reason = reason
        self.last_result = last_result
        self.slots = [(owner, name) for owner, name in slots if name != "grad"]
        self.keeps_graph = keeps_graph  # results returned with their graphs (a forward the caller differentiates)

    def ready(self):
        return True

    def replay(self, args, kwargs):
        before = read_slots(self.slots)
        result = self.fn(*args, **kwargs)
        keep_replaced_tensors(before)  # the same attributes, so the next call finds this entry again
        return result if self.keeps_graph else _detached(result)
