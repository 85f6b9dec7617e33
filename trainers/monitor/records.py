"""``StepRecord``: what the monitor counted at one iteration, and its rows in CSV and JSON lines.

"Record" means only this in needle's trainers: one monitored step's counters, in memory. Written
to a file, a record becomes a row (``csv_row``, ``as_dict``) and goes through ``trainers.io``.
"""
from ..io import CSV_ROWS, JSON_LINES, write_rows

FIELDS = (
    "iteration",
    "live_tensors",
    "live_nodes",
    "live_spent_nodes",
    "nodes_created",
    "nodes_freed",
    "backward_calls",
    "bytes_by_device",
    "host_rss",
    "device_memory_in_use",
    "device_memory_peak",
    "wall_time",
)
# NOTE: CSV has one bytes column per device; these are always there, so a file streamed step by
# step keeps one header even when a device first appears late in the run.
CSV_DEVICES = ("cpu", "cuda")


class StepRecord:
    """What the monitor saw at the end of one iteration.

    Attributes:
        iteration: 0 for the first ``step()``.
        live_tensors, live_nodes: live Values and live graph nodes (Values with an op).
        live_spent_nodes: live graph nodes that a backward() already went through.
        nodes_created, nodes_freed: graph nodes made and freed since the previous step.
        backward_calls: backward() passes since the previous step.
        bytes_by_device: bytes held by live arrays, per device name.
        host_rss: resident set size of the process, in bytes.
        device_memory_in_use, device_memory_peak: CuPy pool bytes (0 without a GPU).
        wall_time: seconds since the previous step (since the monitor started, for the first).
    """

    __slots__ = FIELDS

    def __init__(
        self,
        iteration: int,
        live_tensors: int,
        live_nodes: int,
        live_spent_nodes: int,
        nodes_created: int,
        nodes_freed: int,
        backward_calls: int,
        bytes_by_device: dict,
        host_rss: int,
        device_memory_in_use: int,
        device_memory_peak: int,
        wall_time: float,
    ):
        # NOTE: spelled out rather than a loop over FIELDS: one StepRecord per iteration, kept cheap.
        self.iteration = iteration
        self.live_tensors = live_tensors
        self.live_nodes = live_nodes
        self.live_spent_nodes = live_spent_nodes
        self.nodes_created = nodes_created
        self.nodes_freed = nodes_freed
        self.backward_calls = backward_calls
        self.bytes_by_device = bytes_by_device
        self.host_rss = host_rss
        self.device_memory_in_use = device_memory_in_use
        self.device_memory_peak = device_memory_peak
        self.wall_time = wall_time

    @property
    def live_bytes(self) -> int:
        return sum(self.bytes_by_device.values())

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}

    def __repr__(self):
        return f"StepRecord(iteration={self.iteration}, live_nodes={self.live_nodes}, live_bytes={self.live_bytes})"


def csv_columns():
    """The CSV header: every field, with ``bytes_by_device`` split into ``bytes_cpu``, ``bytes_cuda``, ``bytes_other``."""
    columns = [name for name in FIELDS if name != "bytes_by_device"]
    return columns + [f"bytes_{device}" for device in CSV_DEVICES] + ["bytes_other"]


def csv_row(record):
    """The CSV row of one StepRecord: ``bytes_by_device`` split into one column per device."""
    row = record.as_dict()
    devices = row.pop("bytes_by_device")
    for device in CSV_DEVICES:
        row[f"bytes_{device}"] = devices.get(device, 0)
    row["bytes_other"] = sum(n for device, n in devices.items() if device not in CSV_DEVICES)
    return row


def write_csv(records, path):
    """Write StepRecords as CSV rows, atomically (one column per field; bytes one column per device)."""
    write_rows(path, (csv_row(r) for r in records), csv_columns(), CSV_ROWS, what="monitor export")


def write_jsonl(records, path):
    """Write StepRecords as JSON lines, atomically, one object per iteration."""
    write_rows(path, (r.as_dict() for r in records), FIELDS, JSON_LINES, what="monitor export")
