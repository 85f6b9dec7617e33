"""The course's module path ``needle.backend_numpy``: the numpy (CPU) device and its helpers.

In the course this module is the devices of ``NEEDLE_BACKEND=np``. needle's CPU device is numpy
under every backend, so this module re-exports it: ``Device`` (the device class), ``CPUDevice``
(the class of ``cpu()``), ``cpu``, ``default_device`` and ``all_devices`` (needle's list: the CPU
and CUDA, enabled or not). See :mod:`needle.course_compat`.

Example:
    >>> from needle.backend_numpy import CPUDevice, cpu
    >>> isinstance(cpu(), CPUDevice), cpu().zeros(2).tolist()
    (True, [0.0, 0.0])
"""
from .backend_ndarray.device import CPUDevice, Device, all_devices, cpu, default_device

__all__ = ["CPUDevice", "Device", "all_devices", "cpu", "default_device"]
