"""Pins needle's backend for tests that assert its float32 default, whatever NEEDLE_BACKEND says.

``@pytest.mark.needle_backend("nd")`` runs a test under that backend; doctests always run under
``nd``, the default their printed outputs show. Everything else runs under the exported backend,
so the suite checks both ``NEEDLE_BACKEND=nd`` and ``=np``.
"""
import contextlib

import pytest

from needle import backend_selection


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needle_backend(name): run the test under NEEDLE_BACKEND=name ('nd' or 'np')"
    )


@pytest.fixture(autouse=True)
def pinned_needle_backend(request):
    """Apply a test's ``needle_backend`` mark (and ``nd`` for doctests) for the test's duration."""
    marker = request.node.get_closest_marker("needle_backend")
    if marker is not None:
        context = backend_selection.use_backend(*marker.args)
    elif isinstance(request.node, pytest.DoctestItem):
        context = backend_selection.use_backend("nd")
    else:
        context = contextlib.nullcontext()
    with context:
        yield


# On numpy 1 ``ndl.compile`` refuses (needle.compiler.compiled.require_supported_numpy), so the
# tests of what it computes do not apply there; tests/compile/test_numpy_requirement.py checks the
# refusal, and the CUDA graph bookkeeping (no capture) still runs.
_COMPILE_TESTS_ON_NUMPY_1 = ("test_numpy_requirement.py", "test_cuda_graph.py")


def pytest_collection_modifyitems(config, items):
    from needle.compiler.compiled import NUMPY_MAJOR

    if NUMPY_MAJOR >= 2:
        return
    refused = pytest.mark.skip(reason="ndl.compile needs numpy >= 2 and refuses on numpy 1 (test_numpy_requirement.py)")
    for item in items:
        path = str(item.path).replace("\\", "/")
        if "/tests/compile/" in path and item.path.name not in _COMPILE_TESTS_ON_NUMPY_1:
            item.add_marker(refused)
        elif "/needle/compiler/" in path:  # the docstring examples compile and replay a step
            item.add_marker(refused)
