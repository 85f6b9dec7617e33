"""The graph-leak diagnosis: from the O(1) counters to a warning that names the user's line and its fix.

``machine`` (``LeakDiagnosis`` and its states, one class each), ``detector`` (reads the counters),
``locator`` (notes where and when each node is made, once a leak is suspected), ``findings`` (reads
that evidence into a ``Finding``), ``adding_line`` (the line that keeps it), ``evidence``
(``Suspicion``, ``Finding``), ``quiet`` (the quiet periods after a report, per growth), ``runs``
(when a loop starts again), ``wasted`` (forwards freed with no backward), ``sites`` (where in the
user's code), ``source`` (the one reader of the user's line), ``report`` (the warning's text and
what a leak keeps alive) and ``warnings`` (the categories, ``NEEDLE_WARNINGS`` and ``warn_at``). It never imports the trainer, the callbacks or the monitor.
"""
from .evidence import Finding, Suspicion
from .machine import LeakDiagnosis
from .warnings import DiagnosticWarning, GraphLeakWarning, NoGradWarning
