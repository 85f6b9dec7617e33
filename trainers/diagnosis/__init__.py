"""The graph-leak diagnosis: from the O(1) counters to a warning that names the user's line and its fix.

``machine`` (``LeakDiagnosis``, the state machine), ``detector`` (reads the counters),
``locator`` (finds the line that makes the retained graph), ``adding_line`` (the line that keeps
it), ``evidence`` (``Suspicion``, ``Finding``), ``sites`` (where in the user's code), ``report``
(the warning's text and what a leak keeps alive) and ``warnings`` (the categories and
``NEEDLE_WARNINGS``). It never imports the trainer, the callbacks or the monitor.
"""
from .evidence import Finding, Suspicion
from .machine import LeakDiagnosis
from .warnings import DiagnosticWarning, GraphLeakWarning, NoGradWarning
