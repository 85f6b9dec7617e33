"""The host's part of a CUDA capture: arrays a step uploads from the host, redone before each launch.

A step on the GPU may still make arrays on the host and upload them: Dropout draws its mask with
``numpy.random.rand`` (so that a seed gives the same masks on every device) and
``Device.from_host`` copies it to the GPU. A CUDA graph cannot hold that upload, and replayed as
captured it would reuse the first mask. So while a step is captured, :class:`HostUploads`
records the host side with the CPU capture's recorder (each RNG draw and the numpy operations on
it: the mask's ``<= p`` and its cast), and gives each upload a device buffer of its own, which
the graph reads. Before each launch, :meth:`HostUploads.before_launch` redraws (the same
functions in the same order, from numpy's global RNG, as the eager step draws) and copies each
result into its buffer, on the stream the launch goes on. A host array that no draw made (a
constant the step builds from Python values) is uploaded at every launch as captured.

Example (numpy stands in for the device):
    >>> import numpy
    >>> def upload(device, host): device[...] = host
    >>> uploads = HostUploads(upload)
    >>> with uploads:
    ...     mask = (numpy.random.rand(4) <= 0.5).astype("float32")  # recorded, not yet a value
    ...     buffer = uploads.buffer_for(mask, numpy.empty)
    >>> numpy.random.seed(1); expected = (numpy.random.rand(4) <= 0.5).astype("float32")
    >>> numpy.random.seed(1); uploads.before_launch()
    >>> bool((buffer == expected).all())
    True
"""
import threading

import numpy

from .recorder import Recorder
from .traced_array import TracedArray


class HostUploads:
    """The recorded host draws of one capture and the device buffers their results go to.

    While the ``with`` block runs, the recorder is active and, if ``device_class`` is given, this
    thread's ``device_class.from_host`` uploads to any device but the host go to :meth:`buffer_for`
    (other threads upload as usual).

    Args:
        upload: ``upload(device_array, host_array)`` copies host values into a device array, on
            the stream the replays launch on.
        device_class: the class whose ``from_host`` makes every upload (needle's ``Device``), or
            None when the caller calls :meth:`buffer_for` itself.
        host_device: the CPU device, whose ``from_host`` casts as the eager upload does.
    """

    def __init__(self, upload, device_class=None, host_device=None):
        self._recorder = Recorder(constructors=False)  # the host's draws only: the step's arrays are CuPy's
        self._upload = upload
        self._device_class, self._host_device = device_class, host_device
        self._original_from_host = None
        self.uploads = []  # (host array the recorded steps rewrite, or a constant; its device buffer)

    def __enter__(self):
        self._recorder.start()
        if self._device_class is not None:
            self._original_from_host = original = self._device_class.from_host
            capturing_thread, host_device = threading.get_ident(), self._host_device

            def from_host(device, host_array, dtype="float32"):
                if device.name == "cpu" or threading.get_ident() != capturing_thread:
                    return original(device, host_array, dtype)
                cast = original(host_device, host_array, dtype)  # the eager upload's cast, on the host
                return self.buffer_for(cast, device.xp.empty)

            self._device_class.from_host = from_host
        return self

    def __exit__(self, *exc):
        if self._original_from_host is not None:
            self._device_class.from_host, self._original_from_host = self._original_from_host, None
        self._recorder.stop()
        return False

    @property
    def guards(self):
        """Values needle's own code read from a draw while capturing (the replay cannot check them)."""
        return self._recorder.guards

    def buffer_for(self, host_array, empty):
        """A device buffer (``empty(shape, dtype)``) that holds ``host_array``'s values at every
        launch; ``host_array`` is the array as the eager upload would copy it (cast already)."""
        if isinstance(host_array, TracedArray):
            host = host_array.view(numpy.ndarray)  # rewritten by the recorded steps
        else:
            host = numpy.array(host_array, copy=True)  # a constant: the capture's values
        buffer = empty(host.shape, host.dtype)
        self.uploads.append((host, buffer))
        return buffer

    def before_launch(self):
        """Redraw on the host, in the captured order, and copy each array into its device buffer."""
        for step in self._recorder.steps:
            step.run()
        for host, buffer in self.uploads:
            self._upload(buffer, numpy.ascontiguousarray(host))
