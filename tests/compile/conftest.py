"""On numpy 1 ``ndl.compile`` refuses (needle.compiler.compiled.require_supported_numpy), so the
tests of what it computes do not apply there; test_numpy_requirement.py checks the refusal, and
the CUDA graph bookkeeping (no capture) still runs."""
import pytest

from needle.compiler.compiled import NUMPY_MAJOR

RUN_ON_NUMPY_1 = ("test_numpy_requirement.py", "test_cuda_graph.py")


def pytest_collection_modifyitems(config, items):
    if NUMPY_MAJOR >= 2:
        return
    refused = pytest.mark.skip(reason="ndl.compile needs numpy >= 2 and refuses on numpy 1 (see test_numpy_requirement.py)")
    for item in items:
        if "tests/compile/" in str(item.path).replace("\\", "/") and item.path.name not in RUN_ON_NUMPY_1:
            item.add_marker(refused)
