"""MemoryMonitor: counts graph nodes and memory every iteration, and warns on leaks.

One ``step()`` per iteration reads needle's O(1) counters, the process's memory and, on CUDA,
CuPy's pool. A healthy loop costs a few microseconds per step; only a suspected leak switches on
the costlier search for the user's line (``trainers.diagnosis`` owns that search). What the
monitor remembers is bounded (``trainers.monitor.history``); every step goes to a file only on request.
"""
from __future__ import annotations

import collections
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal, TypeVar

from needle import autograd

from ..callbacks.base import Callback
from ..diagnosis.machine import LeakDiagnosis
from ..diagnosis.sites import notebook_cell
from ..diagnosis.wasted import counts_between
from ..diagnosis.warnings import GraphLeakWarning, NoGradWarning, warn_at
from .explanation import Explanation
from .history import StepHistory
from .message_wrap import wrap_message
from .memory import DeviceMemory, HostMemory
from .records import StepRecord, write_csv, write_jsonl
from .step_log import StepLog

if TYPE_CHECKING:
    from needle.backend_ndarray import Device

    from ..diagnosis.evidence import Finding
    from ..trainer import Trainer

_Item = TypeVar("_Item")

WARN_MODES = ("once", "always", "error", "ignore")


class MemoryMonitor(Callback):
    """Counts graph nodes and memory once per iteration (one ``StepRecord``) and warns on graph leaks.

    In a hand-written loop call ``step()`` at the end of every iteration (or iterate
    ``watch(loader)``); in a ``Trainer`` it is a callback like any other, stepping after every
    training batch.

    Args:
        warn: "once" (each distinct problem warns once), "always" (every time it is found again),
            "error" (raise the warning as an exception) or "ignore" (count only, no diagnosis).
        device: the device whose memory pool to read (``needle.cuda()``); None reads no GPU.
        recent: how many of the latest step records ``history`` keeps whole.
        long_run_points: the most samples of the downsampled long-run series.
        log_path: a ``.csv`` or ``.jsonl`` file to stream every step's row to, as the run goes
            (untouched until the first step; in a Trainer that resumed at step N, the rows of
            iterations 0 .. N-1 are kept and the log goes on from iteration N).

    Attributes:
        history: a bounded ``StepHistory`` of ``StepRecord``s (``len`` counts every step); not the
            trainer's ``MetricsHistory`` (``trainer.history``: loss and accuracy per step and epoch).
        last_finding: the latest reported ``Finding`` (``retained_nodes`` held weakly), or None.
        warnings_issued: how many warnings were issued, by category name.

    Example:
        >>> import needle as ndl
        >>> from trainers import MemoryMonitor
        >>> w = ndl.Tensor([1.0, 2.0])
        >>> monitor = MemoryMonitor()
        >>> for _ in range(3):
        ...     loss = (w * w).sum()
        ...     loss.backward()
        ...     record = monitor.step()
        >>> record.iteration, record.backward_calls, monitor.diagnosis.state
        (2, 1, 'watching')
    """

    def __init__(
        self,
        warn: str = "once",
        device: Device | None = None,
        recent: int = 1024,
        long_run_points: int = 2048,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if warn not in WARN_MODES:
            raise ValueError(f"warn must be one of {WARN_MODES}, got {warn!r}")
        self.history = StepHistory(recent=recent, long_run_points=long_run_points)
        self._log = StepLog(log_path) if log_path is not None else None
        self.warn = warn
        self.warnings_issued = collections.Counter()
        self._host = HostMemory()
        self._device = DeviceMemory(device)
        self._reported = set()
        self.diagnosis = LeakDiagnosis(self._emit, on_new_run=self._reported.clear)  # a new run warns anew
        self._previous = autograd.snapshot()
        self._previous_time = time.perf_counter()

    # ---- one step -------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """Count the iteration that just ended; returns its :class:`StepRecord` (also kept in ``history``)."""
        now = time.perf_counter()
        counters = autograd.snapshot()
        previous = self._previous
        record = StepRecord(
            iteration=self.history.count,
            live_tensors=counters.live_tensors,
            live_nodes=counters.live_nodes,
            live_spent_nodes=counters.live_spent_nodes,
            nodes_created=counters.nodes_created - previous.nodes_created,
            nodes_freed=counters.nodes_freed - previous.nodes_freed,
            backward_calls=counters.backward_calls - previous.backward_calls,
            bytes_by_device=counters.bytes_by_device,
            host_rss=self._host.rss(),
            device_memory_in_use=self._device.in_use(),
            device_memory_peak=self._device.peak,
            wall_time=now - self._previous_time,
        )
        self.history.append(record)
        if self._log is not None:
            self._log.write(record)
        self._previous = counters
        self._previous_time = now
        if self.warn != "ignore":
            self.diagnosis.observe(record, sys._getframe(1), counts_between(previous, counters))
        return record

    def watch(self, iterable: Iterable[_Item]) -> Iterator[_Item]:
        """Yield from ``iterable``, calling ``step()`` after each item's iteration ends (each call is a
        new run: a leak found before is warned again)."""
        self.diagnosis.runs.mark()
        for item in iterable:
            yield item
            self.step()

    def __enter__(self) -> MemoryMonitor:
        return self

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        self.close()
        return False

    def close(self) -> None:
        """Stop any leak search in progress (restores needle's unobserved fast path) and close
        the step log (a later step reopens it for appending)."""
        self.diagnosis.close()
        if self._log is not None:
            self._log.close()

    @property
    def latest(self) -> StepRecord | None:
        return self.history[-1] if self.history else None

    @property
    def last_finding(self) -> Finding | None:
        """The latest ``Finding``: its kind, site and the graph nodes one iteration retained.

        It holds those nodes weakly, with the text and DOT ``explain()`` shows, so it keeps no graph
        alive once your own reference goes; ``clear_finding()`` drops it.
        """
        return self.diagnosis.last_finding

    def explain(self, path: str | os.PathLike[str] | None = None) -> Explanation | str:
        """What the last leak keeps alive: its retained graph, collapsed across iterations.

        Without ``path`` it returns an :class:`Explanation` that shows itself once: as text in a
        terminal (``print(monitor.explain())``, or the REPL's echo), as HTML with the graph drawn
        (where graphviz is installed) when a notebook cell ends in ``monitor.explain()``. With
        ``path`` it writes the graph there (``.dot`` text; ``.svg``/``.png`` need graphviz) and
        returns the path.
        """
        from ..diagnosis.report import explain, explain_dot

        finding = self.last_finding
        if path is not None:
            return explain(finding, path)
        return Explanation(explain(finding), dot=explain_dot(finding))

    def clear_finding(self) -> None:
        """Drop ``last_finding`` and the graph nodes it keeps alive."""
        self.diagnosis.last_finding = None

    # ---- as a Trainer callback -------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer) -> None:
        self.diagnosis.runs.mark()  # each fit is a new run
        if not self.history.count:  # the first StepRecord covers the first step, not what ran before fit
            self._previous = autograd.snapshot()
            self._previous_time = time.perf_counter()
        if self._log is not None:  # a resumed trainer: keep the log's rows up to its step, then append
            self._log.resume(trainer.global_step, self.history.count)

    def on_train_batch_end(self, trainer: Trainer, metrics: dict) -> None:
        self.step()

    def on_fit_end(self, trainer: Trainer) -> None:
        self.close()

    def on_exception(self, trainer: Trainer, error: BaseException) -> None:
        self.close()

    # ---- warnings -------------------------------------------------------------------------
    def _emit(self, message, category, key, site):
        if self.warn == "once":
            if key in self._reported:
                return
            self._reported.add(key)
        self.warnings_issued[category.__name__] += 1
        if self.warn == "error":
            raise category(message)
        filename, lineno = site if site else ("<unknown>", 0)
        cell = notebook_cell(filename)
        if cell is not None:
            # Python would head the warning with the kernel's temporary file and repeat the source
            # line after the message; named as the cell, it does neither (the message shows the line).
            filename, message = cell, wrap_message(message)
        warn_at(message, category, filename, lineno)  # the message quotes the line: shown once

    # ---- reports --------------------------------------------------------------------------
    def summary(self) -> str:
        """A few lines: iterations, peak graph nodes and memory, and the warnings issued."""
        history = self.history
        if not history:
            return "MemoryMonitor: no iterations monitored"
        first, last = history.first, history[-1]
        lines = [
            f"MemoryMonitor: {len(history)} iterations",
            f"  live graph nodes: first {first.live_nodes}, last {last.live_nodes}, peak {history.peak_live_nodes}",
            f"  array memory: last {last.live_bytes / 1e6:.2f} MB, peak {history.peak_live_bytes / 1e6:.2f} MB",
            f"  host RSS: peak {history.peak_host_rss / 1e6:.1f} MB",
            f"  leak warnings: {self.warnings_issued[GraphLeakWarning.__name__]}",
            f"  no_grad warnings: {self.warnings_issued[NoGradWarning.__name__]}",
        ]
        small = self.diagnosis.wasted.small_summary()
        if small is not None:
            lines.append(small)
        if self._device.enabled:
            lines.append(f"  GPU pool: peak {self._device.peak / 1e6:.1f} MB")
        return "\n".join(lines)

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the step records held (the recent window and the long-run samples before it) as
        CSV rows, atomically."""
        write_csv(self.history.records(), path)

    def to_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write the step records held as JSON lines, atomically (for every step, pass ``log_path`` instead)."""
        write_jsonl(self.history.records(), path)

    def plot(self, path: str | os.PathLike[str] | None = None) -> Any:
        """Draw live graph nodes and memory against iteration (needs matplotlib).

        Returns the ``matplotlib.figure.Figure``: a notebook cell ending in ``monitor.plot()``
        shows it inline. With ``path`` it is also written there as a PNG.
        """
        from .plot import plot_step_history

        return plot_step_history(self.history.records(), path)
