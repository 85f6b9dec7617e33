"""Fixtures shared by the core's tests: devices, lazy mode, and a clean view of the graph counters."""
import gc

import pytest

import needle as ndl
import needle.autograd


def _cuda_param():
    return pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not ndl.cuda().enabled(), reason="no CUDA device (CuPy or a GPU is missing)"),
    )


@pytest.fixture(params=["cpu", _cuda_param()])
def device(request):
    """Every device: ``ndl.cpu()``, and ``ndl.cuda()`` where CuPy finds a GPU (skipped otherwise)."""
    return ndl.cpu() if request.param == "cpu" else ndl.cuda()


@pytest.fixture
def cuda_device():
    """The CUDA device, for tests that need two devices; skips without one."""
    if not ndl.cuda().enabled():
        pytest.skip("no CUDA device (CuPy or a GPU is missing)")
    return ndl.cuda()


@pytest.fixture(params=[False, True], ids=["eager", "lazy"])
def lazy_mode(request):
    """Run the test eagerly and with ``needle.autograd.LAZY_MODE = True``; the flag is restored after."""
    saved = needle.autograd.LAZY_MODE
    needle.autograd.LAZY_MODE = request.param
    try:
        yield request.param
    finally:
        needle.autograd.LAZY_MODE = saved


@pytest.fixture
def graph_baseline():
    """A function returning the counters after collecting garbage, so that leftovers of earlier tests do not count."""

    def read():
        gc.collect()
        return ndl.autograd.snapshot()

    return read


@pytest.fixture(autouse=True)
def grad_mode_is_restored():
    """Fail a test that leaves grad mode switched off for the tests after it."""
    yield
    enabled = ndl.is_grad_enabled()
    ndl.set_grad_enabled(True)
    assert enabled, "the test left grad mode disabled"
