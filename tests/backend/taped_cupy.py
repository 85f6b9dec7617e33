"""A tape standing in for CUDA stream capture, over needle's CUDA kernels compiled for the host.

``taped_cupy(tape)`` is ``host_cupy()`` (numpy, with ``ElementwiseKernel`` compiled by g++) whose
kernels, while ``tape.recording``, allocate their outputs as CuPy does under capture but are kept
instead of run; ``tape.launch()`` runs the kept kernels in order, as a graph launch does.
"""
import numpy as np

from host_cupy import HostElementwiseKernel, host_cupy


class Tape:
    """Stands in for a capturing stream: kernels launched while ``recording`` are kept, in order."""

    def __init__(self):
        self.recording = False
        self.kernels = []

    def launch(self):
        for run in self.kernels:
            run()


def taped_cupy(tape):
    module = host_cupy()

    class TapedKernel(HostElementwiseKernel):
        def __call__(self, *args, size=None):
            if not tape.recording:
                return super().__call__(*args, size=size)
            # NOTE: as CuPy under capture: the outputs are allocated now, the kernel only recorded
            outputs = [p for p in self.params if p.is_output]
            if len(args) < len(self.params):
                bindings = self._bind(args)
                arrays = [a for p, a in zip(self.params, args) if not p.raw and isinstance(a, np.ndarray) and a.ndim]
                shape = (size,) if size is not None else np.broadcast_shapes(*(a.shape for a in arrays))
                args = args + tuple(np.zeros(shape, p.dtype(bindings)) for p in outputs)  # zeros: no overflow warnings
            tape.kernels.append(lambda: HostElementwiseKernel.__call__(self, *args, size=size))
            made = args[len(args) - len(outputs):]
            return made[0] if len(made) == 1 else made

    module.ElementwiseKernel = TapedKernel
    return module
