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
import numpy

from .recorder import Recorder
from .traced_array import TracedArray


class HostUploads:
    """The recorded host draws of one capture and the device buffers their results go to.

    Args:
        upload: ``upload(device_array, host_array)`` copies host values into a device array, on
            the stream the replays launch on.
    """

    def __init__(self, upload):
        self._recorder = Recorder()
        self._upload = upload
        self.uploads = []  # (host array the recorded steps rewrite, or a constant; its device buffer)

    def __enter__(self):
        self._recorder.start()
        return self

    def __exit__(self, *exc):
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
