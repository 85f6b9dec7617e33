"""needle's device-abstracted array: one NDArray interface over numpy (CPU) and CuPy (CUDA)."""
from .device import Device, all_devices, as_device, cpu, cuda, default_device, device_of, resolve_dtype
from .ndarray import NDArray
from .course_api import BackendDevice, cpu_numpy
from .handles import Handle
from .functions import (
    array,
    astype,
    broadcast_to,
    empty,
    exp,
    flip,
    full,
    log,
    max,
    maximum,
    ones,
    reshape,
    split,
    stack,
    sum,
    tanh,
    transpose,
    where,
    zeros,
)
from . import ndarray_backend_numpy
