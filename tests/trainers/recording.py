"""Run a loop under a MemoryMonitor and note at which iteration each diagnostic warning arrived."""
import warnings

from trainers import DiagnosticWarning, MemoryMonitor


class TracingMonitor(MemoryMonitor):
    """A MemoryMonitor that notes the iteration at which each caught warning arrived."""

    def __init__(self, caught, **options):
        super().__init__(**options)
        self.caught = caught
        self.arrivals = []  # (iteration, warning)

    def step(self):
        seen = len(self.caught)
        record = super().step()
        self.arrivals.extend((record.iteration, w) for w in self.caught[seen:])
        return record


def run_recorded(loop, iterations, warn="once", **loop_options):
    """``(monitor, [(iteration, warning), ...])`` for the diagnostic warnings ``loop`` drew."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TracingMonitor(caught, warn=warn) as monitor:
            loop(monitor, iterations, **loop_options)
    arrivals = [(i, w) for i, w in monitor.arrivals if issubclass(w.category, DiagnosticWarning)]
    return monitor, arrivals


def first_warning(loop, iterations, **loop_options):
    """The iteration and the warning of the only diagnostic warning ``loop`` draws (asserts there is one)."""
    _, arrivals = run_recorded(loop, iterations, **loop_options)
    assert len(arrivals) == 1, [str(w.message) for _, w in arrivals]
    return arrivals[0]
