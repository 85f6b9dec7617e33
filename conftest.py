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
