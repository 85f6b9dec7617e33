"""The trainer's callbacks: the ``Callback`` base and its hook order, and the callbacks that ship.

``base`` (``Callback``, ``HOOKS``), ``progress`` (``ProgressBar``), ``clipping``
(``GradientClipping``), ``checkpoint`` (``Checkpoint`` and the checkpoint file format) and
``loggers`` (``CSVLogger``, ``JSONLinesLogger``). ``MemoryMonitor`` is a callback too; it lives in
``trainers.monitor``.
"""
from .base import HOOKS, Callback
from .checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .clipping import GradientClipping
from .loggers import CSVLogger, JSONLinesLogger, Logger
from .progress import ProgressBar
