"""trainers: a training loop and a memory monitor that catch graph leaks as they start.

``MemoryMonitor`` works in any hand-written loop (one ``step()`` per iteration); ``Trainer``
runs the usual loop with the monitor, a progress bar, callbacks and checkpoints.
``NEEDLE_WARNINGS=error`` in the environment turns every diagnostic warning into an error.
"""
from .warning_categories import DiagnosticWarning, GraphLeakWarning, NoGradWarning
from .records import StepRecord
from .evidence import Finding, Suspicion
from .monitor import MemoryMonitor
from .callbacks import Callback
from .clipping import GradientClipping
from .progress import ProgressBar
from .checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from .trainer import History, NonFiniteLossError, Trainer
from .fit_checks import FitContractError
from .loggers import CSVLogger, JSONLinesLogger, Logger
from .warning_filters import apply_environment

apply_environment()  # NEEDLE_WARNINGS=error|ignore|always|default: see trainers.warning_filters
