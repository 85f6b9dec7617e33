"""``StepHistory``: the monitor's memory of past steps (``monitor.history``), bounded: a recent
window of ``StepRecord``s, a downsampled long run, peaks.

Not the trainer's ``MetricsHistory`` (``trainer.history``, loss and accuracy per step and epoch,
unbounded, in checkpoints): this one holds the graph and memory counters the monitor took.
A run of a million steps must not make the memory-leak detector itself leak, so nothing here
grows with the number of steps: the last ``recent`` records are kept whole, older ones survive
only as a long-run series of numbers in an array allocated once (``long_run_points`` rows,
every ``stride``-th step, the stride doubling whenever it fills), and peaks are running maxima. Every
step's row goes only to a file the user names (``trainers.monitor.step_log.StepLog``).
"""
import collections
from typing import Iterator, List, Optional

import numpy as np

from .records import CSV_DEVICES, FIELDS, StepRecord

_NUMBER_FIELDS = tuple(name for name in FIELDS if name != "bytes_by_device")
_COLUMNS = _NUMBER_FIELDS + tuple(f"bytes_{device}" for device in CSV_DEVICES) + ("bytes_other",)
_INTEGER_FIELDS = frozenset(_NUMBER_FIELDS) - {"wall_time"}
assert _COLUMNS[-3:] == ("bytes_cpu", "bytes_cuda", "bytes_other") and _NUMBER_FIELDS[-1] == "wall_time"


class LongRunSeries:
    """Every ``stride``-th step's numbers in one array allocated up front: its memory never grows.

    When the array fills, every other sample is dropped and the stride doubles, so the series
    always spans the whole run evenly with between half and all of ``points`` samples.
    """

    def __init__(self, points: int):
        self._rows = np.zeros((points, len(_COLUMNS)), dtype=np.float64)
        self.count = 0
        self.stride = 1

    def offer(self, record: StepRecord) -> None:
        if record.iteration % self.stride:
            return
        devices = record.bytes_by_device
        other = sum(n for device, n in devices.items() if device not in CSV_DEVICES) if len(devices) > 1 else 0
        self._rows[self.count] = (
            record.iteration,
            record.live_tensors,
            record.live_nodes,
            record.live_spent_nodes,
            record.nodes_created,
            record.nodes_freed,
            record.backward_calls,
            record.host_rss,
            record.device_memory_in_use,
            record.device_memory_peak,
            record.wall_time,
            devices.get("cpu", 0),
            devices.get("cuda", 0),
            other,
        )
        self.count += 1
        if self.count == len(self._rows):
            self.stride *= 2
            kept = self._rows[: self.count][self._rows[: self.count, 0] % self.stride == 0]
            self.count = len(kept)
            self._rows[: self.count] = kept

    def __len__(self) -> int:
        return self.count

    def iterations(self):
        return self._rows[: self.count, 0].astype(np.int64)

    def records(self, before: Optional[int] = None) -> List[StepRecord]:
        """The samples as StepRecords (those before iteration ``before``, if given)."""
        rows = self._rows[: self.count]
        if before is not None:
            rows = rows[rows[:, 0] < before]
        base = len(_NUMBER_FIELDS)
        result = []
        for row in rows.tolist():
            values = {name: (int(v) if name in _INTEGER_FIELDS else v) for name, v in zip(_NUMBER_FIELDS, row)}
            devices = {device: int(row[base + i]) for i, device in enumerate(CSV_DEVICES) if row[base + i] or device == "cpu"}
            if row[-1]:
                devices["other"] = int(row[-1])
            result.append(StepRecord(bytes_by_device=devices, **values))
        return result


class StepHistory:
    """The ``StepRecord``s of the steps monitored so far, within a fixed memory bound.

    ``len(history)`` counts every step appended; ``history[i]`` is the record of iteration
    ``i`` while it is in the recent window (negative indexes count from the latest);
    iterating yields every record still held, oldest first: all of them while the run is
    shorter than the window, then the long-run samples followed by the recent window.

    Args:
        recent: how many of the latest records are kept whole (>= 1).
        long_run_points: the most samples the long-run series keeps (>= 2).

    Example:
        >>> from trainers.monitor.history import StepHistory
        >>> from trainers.monitor.records import StepRecord
        >>> history = StepHistory(recent=4, long_run_points=4)
        >>> for i in range(100):
        ...     history.append(StepRecord(i, 0, i % 7, 0, 0, 0, 1, {"cpu": 8 * i}, 0, 0, 0, 0.0))
        >>> len(history), history[-1].iteration, len(history.recent), len(history.long_run)
        (100, 99, 4, 2)
        >>> history.peak_live_nodes, history.peak_live_bytes, history.long_run.stride
        (6, 792, 64)
    """

    def __init__(self, recent: int = 1024, long_run_points: int = 2048):
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 1:
            raise ValueError(f"recent must be a positive int (records kept whole); got recent={recent!r}")
        if isinstance(long_run_points, bool) or not isinstance(long_run_points, int) or long_run_points < 2:
            raise ValueError(f"long_run_points must be an int >= 2; got long_run_points={long_run_points!r}")
        self.recent = collections.deque(maxlen=recent)
        self.long_run = LongRunSeries(long_run_points)
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
        self.long_run.offer(record)

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
            raise IndexError(f"history index {index} out of range: {self.count} steps monitored")
        return self.recent[index - oldest]

    def records(self) -> List[StepRecord]:
        """Every record held, oldest first: long-run samples older than the window, then the window."""
        oldest = self.count - len(self.recent)
        return self.long_run.records(before=oldest) + list(self.recent)

    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self.records())

    def __bool__(self) -> bool:
        return self.count > 0

    def __repr__(self):
        return f"StepHistory({self.count} steps, {len(self.recent)} recent, {len(self.long_run)} long-run samples)"
