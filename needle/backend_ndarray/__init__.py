"""needle's device-abstracted array: one NDArray interface over numpy (CPU) and CuPy (CUDA)."""
from .device import Device, all_devices, as_device, cpu, cpu_numpy, cuda, default_device, resolve_dtype
from .ndarray import NDArray
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
    where,
    zeros,
)

BackendDevice = Device
