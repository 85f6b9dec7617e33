"""A signature that ``ndl.compile`` runs eagerly: its step ran correctly but cannot be replayed."""
from .capture import _detached


class EagerEntry:
    """Calls ``fn`` eagerly each time, returning its results without a graph, as a replay does.

    Kept in place of a plan for a signature whose capture fell back
    (:class:`~needle.compiler.errors.EagerFallback`); the fallback warned once, at that capture.
    """

    expected_slots = ()  # no state to check before a call (ready() is always True)
    replays_a_plan = False  # its calls do not count as replays

    def __init__(self, fn, reason, last_result):
        self.fn = fn
        self.reason = reason
        self.last_result = last_result

    def ready(self):
        return True

    def replay(self, args, kwargs):
        return _detached(self.fn(*args, **kwargs))
