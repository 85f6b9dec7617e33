"""The monitor's memory of past steps, bounded: a recent window, a downsampled long run, peaks.

A run of a million steps must not make the memory-leak detector itself leak, so nothing here
grows with the number of steps: the last ``recent`` records are kept whole, older ones survive
only as a long-run series thinned to at most ``long_run_points`` (every ``stride``-th step,
the stride doubling whenever the series fills), and peaks are running maxima. The full
per-step record goes only to a file the user names (``trainers.step_log.StepLog``).
"""
import collections
from typing import Iterator, List, Optional

from .records import StepRecord


class StepHistory:
    """Records of the steps seen so far, within a fixed memory bound.

    ``len(history)`` counts every step recorded; ``history[i]`` is the record of iteration
    ``i`` while it is in the recent window (negative indexes count from the latest);
    iterating yields every record still held, oldest first: all of them while the run is
    shorter than the window, then the long-run samples followed by the recent window.

    Args:
        recent: how many of the latest records are kept whole (>= 1).
        long_run_points: the most samples the long-run series keeps (>= 2).

    Example:
        >>> from trainers.history import StepHistory
        >>> from trainers.records import StepRecord
        >>> history = StepHistory(recent=4, long_run_points=4)
        >>> for i in range(100):
        ...     history.append(StepRecord(i, 0, i % 7, 0, 0, 0, 1, {"cpu": 8 * i}, 0, 0, 0, 0.0))
        >>> len(history), history[-1].iteration, len(history.recent), len(history.long_run)
        (100, 99, 4, 2)
        >>> history.peak_live_nodes, history.peak_live_bytes
        (6, 792)
    """

    def __init__(self, recent: int = 1024, long_run_points: int = 2048):
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 1:
            raise ValueError(f"recent must be a positive int (records kept whole); got recent={recent!r}")
        if isinstance(long_run_points, bool) or not isinstance(long_run_points, int) or long_run_points < 2:
            raise ValueError(f"long_run_points must be an int >= 2; got long_run_points={long_run_points!r}")
        self.recent = collections.deque(maxlen=recent)
        self.long_run: List[StepRecord] = []
        self.long_run_points = long_run_points
        self.stride = 1  # the long-run series holds every stride-th iteration
        self.first: Optional[StepRecord] = None
        self.count = 0
        self.peak_live_nodes = 0
        self.peak_live_bytes = 0
        self.peak_host_rss = 0

    def append(self, record: StepRecord) -> None:
        """Keep ``record`` (the next iteration's) within the bound."""
        if self.first is None:
            self.first = record
        self.count += 1
        self.recent.append(record)
        if record.live_nodes > self.peak_live_nodes:
            self.peak_live_nodes = record.live_nodes
        live_bytes = record.live_bytes
        if live_bytes > self.peak_live_bytes:
            self.peak_live_bytes = live_bytes
        if record.host_rss > self.peak_host_rss:
            self.peak_host_rss = record.host_rss
        if record.iteration % self.stride == 0:
            self.long_run.append(record)
            if len(self.long_run) >= self.long_run_points:
                self.stride *= 2
                self.long_run = [r for r in self.long_run if r.iteration % self.stride == 0]

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        oldest = self.count - len(self.recent)
        if not oldest <= index < self.count:
            if 0 <= index < self.count:
                raise IndexError(
                    f"iteration {index} is older than the recent window ({len(self.recent)} steps, from iteration "
                    f"{oldest}); read history.long_run for the downsampled past, or pass MemoryMonitor(log_path=...) "
                    "to stream every step to a file"
                )
            raise IndexError(f"history index {index} out of range: {self.count} steps recorded")
        return self.recent[index - oldest]

    def records(self) -> List[StepRecord]:
        """Every record held, oldest first: long-run samples older than the window, then the window."""
        oldest = self.count - len(self.recent)
        return [r for r in self.long_run if r.iteration < oldest] + list(self.recent)

    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self.records())

    def __bool__(self) -> bool:
        return self.count > 0

    def __repr__(self):
        return f"StepHistory({self.count} steps, {len(self.recent)} recent, {len(self.long_run)} long-run samples)"
