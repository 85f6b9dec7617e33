"""Memory readings: the process's resident set size and the GPU memory pool, each cheap to read."""
import os

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class HostMemory:
    """Reads this process's resident set size (RSS) in bytes.

    On Linux it reads ``/proc/self/statm`` through a file descriptor kept open (a few
    microseconds); elsewhere it asks psutil.
    """

    def __init__(self):
        self._statm = None
        self._process = None
        try:
            self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            import psutil

            self._process = psutil.Process()

    def rss(self):
        if self._statm is not None:
            fields = os.pread(self._statm, 128, 0).split()
            return int(fields[1]) * _PAGE_SIZE
        return self._process.memory_info().rss

    def close(self):
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None

    def __del__(self):
        self.close()


class DeviceMemory:
    """GPU memory in use by CuPy's default pool, with the peak tracked across readings.

    CuPy's pool reports the bytes in use but keeps no peak, so the peak here is the largest
    reading seen (taken once per monitor step).
    """

    def __init__(self, device):
        self.enabled = device is not None and device.name == "cuda" and device.enabled()
        self._pool = device.xp.get_default_memory_pool() if self.enabled else None
        self.peak = 0

    def in_use(self):
        if not self.enabled:
            return 0
        used = self._pool.used_bytes()
        if used > self.peak:
            self.peak = used
        return used
