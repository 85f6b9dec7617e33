"""MemoryMonitor: counts graph nodes and memory every iteration, and warns on leaks.

One ``step()`` per iteration reads needle's O(1) counters, the process's memory and, on CUDA,
CuPy's pool. A healthy loop costs a few microseconds per step; only a suspected leak switches on
the costlier search for the user's line (see ``trainers.locator``).
"""
import gc
import time
import warnings

from needle import autograd

from .detector import LeakDetector
from .locator import LeakLocator
from .memory import DeviceMemory, HostMemory
from .messages import graph_leak_message, no_grad_message
from .records import StepRecord, write_csv, write_jsonl
from .warning_categories import GraphLeakWarning, NoGradWarning

WARN_MODES = ("once", "always", "error", "ignore")


class MemoryMonitor:
    """Records graph nodes and memory once per iteration and warns on graph leaks.

    Args:
        warn: "once" (each distinct leak warns once), "always" (every time it is found again),
            "error" (raise the warning as an exception) or "ignore" (record only).
        device: the device whose memory pool to read (``needle.cuda()``); None reads no GPU.

    Example:
        >>> import needle as ndl
        >>> from trainers import MemoryMonitor
        >>> w = ndl.Tensor([1.0, 2.0])
        >>> monitor = MemoryMonitor()
        >>> for _ in range(3):
        ...     loss = (w * w).sum()
        ...     loss.backward()
        ...     record = monitor.step()
        >>> record.iteration, record.backward_calls
        (2, 1)
    """

    def __init__(self, warn="once", device=None):
        if warn not in WARN_MODES:
            raise ValueError(f"warn must be one of {WARN_MODES}, got {warn!r}")
        self.warn = warn
        self.history = []
        self._host = HostMemory()
        self._device = DeviceMemory(device)
        self._detector = LeakDetector()
        self._locator = LeakLocator()
        self._reported = set()
        self._pending_finding = None
        self._suspicion = None
        self._checks = 0
        self._full_floor = None  # (spent, live) graph nodes after the last full collection
        self._young_floor = None  # the same after the young-generation collection before it
        self._previous = autograd.snapshot()
        self._previous_time = time.perf_counter()

    # ---- recording ------------------------------------------------------------------------
    def step(self):
        """Record the iteration that just ended; returns its :class:`StepRecord`."""
        now = time.perf_counter()
        counters = autograd.snapshot()
        previous = self._previous
        device_in_use = self._device.in_use()
        record = StepRecord(
            iteration=len(self.history),
            live_tensors=counters.live_tensors,
            live_nodes=counters.live_nodes,
            live_spent_nodes=counters.live_spent_nodes,
            nodes_created=counters.nodes_created - previous.nodes_created,
            nodes_freed=counters.nodes_freed - previous.nodes_freed,
            backward_calls=counters.backward_calls - previous.backward_calls,
            bytes_by_device=counters.bytes_by_device,
            host_rss=self._host.rss(),
            device_memory_in_use=device_in_use,
            device_memory_peak=self._device.peak,
            wall_time=now - self._previous_time,
        )
        self.history.append(record)
        self._previous = counters
        self._previous_time = now
        if self.warn != "ignore":
            self._diagnose(record)
        return record

    def watch(self, iterable):
        """Yield from ``iterable``, calling ``step()`` after each item's iteration ends."""
        for item in iterable:
            yield item
            self.step()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def close(self):
        """Stop any leak search in progress (restores needle's unobserved fast path)."""
        self._locator.stop()

    @property
    def latest(self):
        return self.history[-1] if self.history else None

    # ---- diagnosis ------------------------------------------------------------------------
    def _diagnose(self, record):
        iteration = record.iteration
        if self._pending_finding is not None:
            finding = self._pending_finding
            self._pending_finding = None
            finding.site = self._locator.container_site()
            finding.container = None
            self._finish_check(iteration)
            self._report_leak(finding, record)
            return
        if self._locator.active:
            self._locator.advance(iteration + 1)
            self._continue_check(record)
            return
        suspicion = self._detector.observe(record)
        if suspicion in ("retained", "pending") and not self._outlasts_collection(suspicion):
            return
        if suspicion is not None:
            self._suspicion = suspicion
            self._locator.start(iteration + 1)

    def _outlasts_collection(self, suspicion):
        """Whether the growth survives a garbage collection (and is worth locating).

        Graphs caught in reference cycles (backward()'s default ``create_graph=True`` makes some:
        a node's ``.grad`` graph leads back to the node) are freed only when Python's collector
        runs, so a healthy loop's counts climb between collections. A young-generation collection
        settles most suspicions; a full one (slow in a large process) runs only when counts still
        exceed those of the last check. A full collection moves the graph alive at that moment into
        the old generation, where it stays as garbage, so the young baseline is kept apart.
        """
        field = 0 if suspicion == "retained" else 1
        gc.collect(1)
        young = _graph_counts()
        if self._young_floor is not None and young[field] <= self._young_floor[field]:
            self._detector.dismiss(suspicion, *young)
            return False
        gc.collect()
        collected = _graph_counts()
        full_floor = self._full_floor
        self._full_floor = collected
        if full_floor is not None and collected[field] > full_floor[field]:
            return True
        # NOTE: the first full collection clears what earlier code left; only a later one gives a
        # young baseline that holds no garbage but the graph a full collection itself promoted.
        self._young_floor = young if full_floor is not None else None
        self._detector.dismiss(suspicion, *collected, recheck_next_step=full_floor is None)
        return False

    def _continue_check(self, record):
        iteration = record.iteration
        if self._suspicion == "no_grad":
            sites = self._locator.creation_sites(iteration)
            site = sites.most_common(1)[0][0] if sites else None
            live_nodes, wasted_bytes = self._locator.live_made_in(iteration)
            self._finish_check(iteration)
            # NOTE: only a graph still held at the iteration's end (logits, a loss) is reported:
            # a node made and dropped at once, as in `total = (total + x * x).detach()`, is the
            # recommended fix of a leak and must not draw a warning.
            if live_nodes:
                self._report_no_grad(record, site, wasted_bytes)
            return
        if self._locator.iterations_recorded(iteration) < 2:
            return
        finding = self._locator.find(iteration)
        if finding is None:
            self._finish_check(iteration)  # a false alarm: nothing survived; stay quiet a while
            return
        if finding.kind == "container":
            self._pending_finding = finding
            self._locator.watch_container(finding.container)
            return
        self._finish_check(iteration)
        self._report_leak(finding, record)

    def _finish_check(self, iteration):
        self._locator.stop()
        self._checks += 1
        self._detector.reset(quiet_until=iteration + 10 * 2 ** min(self._checks, 6))

    def _report_leak(self, finding, record):
        unused = self._suspicion == "pending"
        nodes, nbytes = self._detector.growth_per_iteration(steps=4, all_nodes=True)
        message = graph_leak_message(finding, nodes, nbytes, record.iteration, record.live_nodes, unused=unused)
        self._emit(message, GraphLeakWarning, finding.key, finding.site or finding.created_site)

    def _report_no_grad(self, record, site, wasted_bytes):
        message = no_grad_message(record.nodes_created, wasted_bytes, self._detector.no_grad_steps + 1, site)
        self._emit(message, NoGradWarning, ("no_grad", site), site)

    def _emit(self, message, category, key, site):
        if self.warn == "once":
            if key in self._reported:
                return
            self._reported.add(key)
        if self.warn == "error":
            raise category(message)
        filename, lineno = site if site else ("<unknown>", 0)
        warnings.warn_explicit(message, category, filename, lineno)

    # ---- reports --------------------------------------------------------------------------
    def summary(self):
        """A few lines: iterations, peak graph nodes and memory, and warnings given."""
        if not self.history:
            return "MemoryMonitor: no iterations recorded"
        peak_nodes = max(r.live_nodes for r in self.history)
        peak_bytes = max(r.live_bytes for r in self.history)
        peak_rss = max(r.host_rss for r in self.history)
        first, last = self.history[0], self.history[-1]
        lines = [
            f"MemoryMonitor: {len(self.history)} iterations",
            f"  live graph nodes: first {first.live_nodes}, last {last.live_nodes}, peak {peak_nodes}",
            f"  array memory: last {last.live_bytes / 1e6:.2f} MB, peak {peak_bytes / 1e6:.2f} MB",
            f"  host RSS: peak {peak_rss / 1e6:.1f} MB",
            f"  leak warnings: {len(self._reported)}",
        ]
        if self._device.enabled:
            lines.append(f"  GPU pool: peak {self._device.peak / 1e6:.1f} MB")
        return "\n".join(lines)

    def to_csv(self, path):
        write_csv(self.history, path)

    def to_jsonl(self, path):
        write_jsonl(self.history, path)

    def plot(self, path):
        """Draw live graph nodes and memory against iteration into a PNG (needs matplotlib)."""
        from .plot import plot_history

        plot_history(self.history, path)


def _graph_counts():
    counters = autograd.snapshot()
    return counters.live_spent_nodes, counters.live_nodes
