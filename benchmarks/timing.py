"""Clocks and memory meters shared by the benchmark's implementations.

A clock reading on a GPU is only meaningful after the device has finished the queued work, so
every implementation hands the benchmark a ``synchronize`` callable that :class:`Stopwatch` calls
before each reading.
"""
import gc
import os
import statistics
import threading
import time

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


def median(values):
    """The median of a non-empty sequence of numbers."""
    return statistics.median(values)


def no_synchronize():
    """The CPU needs no synchronisation before reading the clock."""


class Stopwatch:
    """Accumulates wall-clock seconds, synchronising the device before each reading.

    Example:
        >>> watch = Stopwatch()
        >>> with watch:
        ...     pass
        >>> watch.seconds >= 0.0
        True
    """

    def __init__(self, synchronize=no_synchronize):
        self.synchronize = synchronize
        self.seconds = 0.0
        self._start = None

    def __enter__(self):
        self.synchronize()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        self.synchronize()
        self.seconds += time.perf_counter() - self._start
        return False


def _read_status_kib(field):
    with open(_STATUS) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _can_reset_peak():
    try:
        with open(_CLEAR_REFS, "w") as clear_refs:
            clear_refs.write("5")
        _read_status_kib("VmHWM")
        return True
    except (OSError, KeyError, ValueError):
        return False


class HostPeakMemory:
    """Peak growth of the process's resident set while the ``with`` block runs, in bytes.

    On Linux the kernel's high-water mark (VmHWM) is reset through ``/proc/self/clear_refs``
    before the block and read after it, which costs nothing while the block runs. Elsewhere a
    background thread samples the resident set with psutil every millisecond, which can miss
    a peak shorter than that.
    """

    _reset_supported = None

    def __init__(self):
        self.peak_growth = 0
        self._baseline = 0
        self._sampler = None
        self._stop = None

    def __enter__(self):
        gc.collect()
        if HostPeakMemory._reset_supported is None:
            HostPeakMemory._reset_supported = _can_reset_peak()
        if HostPeakMemory._reset_supported:
            with open(_CLEAR_REFS, "w") as clear_refs:
                clear_refs.write("5")
            self._baseline = _read_status_kib("VmRSS") * 1024
        else:
            self._start_sampler()
        return self

    def __exit__(self, *exc_info):
        if HostPeakMemory._reset_supported:
            peak = _read_status_kib("VmHWM") * 1024
        else:
            self._stop.set()
            self._sampler.join()
            peak = self._sampled_peak
        self.peak_growth = max(0, peak - self._baseline)
        return False

    def _start_sampler(self):
        import psutil

        process = psutil.Process(os.getpid())
        self._baseline = process.memory_info().rss
        self._sampled_peak = self._baseline
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.001):
                self._sampled_peak = max(self._sampled_peak, process.memory_info().rss)

        self._sampler = threading.Thread(target=sample, daemon=True)
        self._sampler.start()


class CupyPoolPeakMemory:
    """Growth of CuPy's default memory pool while the ``with`` block runs, in bytes.

    The pool's free blocks are returned to the driver first, so afterwards the pool's total
    (it keeps every block it ever held) less what was in use before is the peak growth.
    """

    def __init__(self):
        import cupy

        self._pool = cupy.get_default_memory_pool()
        self._synchronize = cupy.cuda.Device().synchronize
        self.peak_growth = 0
        self.used_after = 0

    def __enter__(self):
        gc.collect()
        self._synchronize()
        self._pool.free_all_blocks()
        self._baseline = self._pool.used_bytes()
        return self

    def __exit__(self, *exc_info):
        self._synchronize()
        self.peak_growth = max(0, self._pool.total_bytes() - self._baseline)
        self.used_after = self._pool.used_bytes() - self._baseline
        return False


class TorchCudaPeakMemory:
    """Growth of PyTorch's CUDA allocations at their peak while the ``with`` block runs, in bytes."""

    def __init__(self):
        import torch

        self._cuda = torch.cuda
        self.peak_growth = 0

    def __enter__(self):
        gc.collect()
        self._cuda.synchronize()
        self._baseline = self._cuda.memory_allocated()
        self._cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc_info):
        self._cuda.synchronize()
        self.peak_growth = max(0, self._cuda.max_memory_allocated() - self._baseline)
        return False
