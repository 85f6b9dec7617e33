"""PyTorch as an optional second oracle for tests whose first oracle is numpy.

``optional_torch()`` is torch where it is installed, and None where it is not or where
``NEEDLE_TESTS_WITHOUT_TORCH=1`` hides it (to run, on a machine with torch, exactly what CI
runs without it). Tests call it instead of ``pytest.importorskip("torch")``, so they never skip:
their numpy check always runs, and the torch comparison runs in addition where torch is present.
"""
import os


def optional_torch():
    """The torch module, or None (not installed, or hidden by NEEDLE_TESTS_WITHOUT_TORCH=1)."""
    if os.environ.get("NEEDLE_TESTS_WITHOUT_TORCH", "") not in ("", "0"):
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch
