"""The memory monitor: ``MemoryMonitor``, the record it takes per step, their bounded history, plots.

``monitor`` (``MemoryMonitor``), ``records`` (``StepRecord`` and its CSV/JSON-lines rows),
``history`` (``StepHistory``, bounded), ``step_log`` (``StepLog``, every step streamed to a file),
``memory`` (RSS and GPU pool readings), ``plot`` (Figures), ``explanation`` (what ``explain()``
returns) and ``message_wrap`` (warnings wrapped for notebooks). The leak diagnosis it runs is
``trainers.diagnosis``.
"""
from .explanation import Explanation
from .monitor import MemoryMonitor
from .history import StepHistory
from .records import StepRecord
