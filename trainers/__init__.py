"""trainers: a training loop and a memory monitor that catch graph leaks as they start.

``MemoryMonitor`` works in any hand-written loop (one ``step()`` per iteration); ``Trainer``
runs the usual loop with the monitor, a progress bar, callbacks and checkpoints.
``NEEDLE_WARNINGS=error`` in the environment turns every diagnostic warning into an error.

Layout: ``trainer`` (the loop), ``metrics_history`` (``MetricsHistory``, the trainer's loss and
accuracy per step and epoch: ``trainer.history``; ``History`` is its earlier name), ``callbacks/``
(the hooks and the callbacks that ship), ``io`` (atomic file writes and the one CSV/JSON-lines row
writer), ``monitor/`` (``MemoryMonitor``, its ``StepRecord`` per step and their bounded
``StepHistory``: ``trainer.monitor.history``, and plots), ``diagnosis/`` (the leak diagnosis;
imports neither the trainer nor the monitor).
"""
from .diagnosis.warnings import DiagnosticWarning, GraphLeakWarning, NoGradWarning
from .monitor.records import StepRecord
from .monitor.history import StepHistory
from .diagnosis.evidence import Finding, Suspicion
from .monitor.monitor import MemoryMonitor
from .callbacks.base import Callback
from .callbacks.clipping import GradientClipping
from .callbacks.progress import ProgressBar
from .callbacks.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .trainer import History, MetricsHistory, NonFiniteLossError, Trainer
from .fit_checks import FitContractError
from .earlier_graphs import EarlierGraphsWarning
from .callbacks.loggers import CSVLogger, JSONLinesLogger, Logger
from .callbacks.tensorboard import TensorBoardLogger
from .diagnosis.warnings import apply_environment

apply_environment()  # NEEDLE_WARNINGS=error|ignore|always|default: see trainers.diagnosis.warnings
