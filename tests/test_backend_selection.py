"""NEEDLE_BACKEND: read once at import; ``np`` keeps numpy's inferred dtypes, ``nd`` makes float32."""
import os
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
from needle import backend_selection

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (what the Tensor is made from, dtype under "np", dtype under "nd")
INFERENCE_CASES = [
    ("float64 array", lambda: np.zeros((2, 2)), np.float64, np.float32),
    ("float32 array", lambda: np.zeros(2, dtype=np.float32), np.float32, np.float32),
    ("float16 array", lambda: np.zeros(2, dtype=np.float16), np.float16, np.float16),
    ("int64 array", lambda: np.arange(3), np.int64, np.int64),
    ("int32 array", lambda: np.arange(3, dtype=np.int32), np.int32, np.int32),
    ("Python float", lambda: 1.5, np.float64, np.float32),
    ("Python int", lambda: 3, np.int64, np.float32),
    ("list of floats", lambda: [1.0, 2.5], np.float64, np.float32),
    ("list of ints", lambda: [[1, 2], [3, 4]], np.int64, np.float32),
    ("mixed list", lambda: [1, 2.5], np.float64, np.float32),
    ("numpy float64 scalar", lambda: np.float64(2.0), np.float64, np.float32),
]


@pytest.mark.parametrize("backend", ["np", "nd"])
@pytest.mark.parametrize("name, make, under_np, under_nd", INFERENCE_CASES, ids=[c[0] for c in INFERENCE_CASES])
def test_tensor_dtype_inference(backend, name, make, under_np, under_nd, device):
    with backend_selection.use_backend(backend):
        t = ndl.Tensor(make(), device=device)
        assert t.dtype == (under_np if backend == "np" else under_nd), name
        assert t.device is device
        assert ndl.Tensor(make(), device=device, dtype="float32").dtype == np.float32, "an explicit dtype wins"
        np.testing.assert_array_equal(t.numpy(), np.asarray(make()).astype(t.dtype))


@pytest.mark.parametrize("backend", ["np", "nd"])
def test_ops_and_training_work_under_both_backends(backend):
    with backend_selection.use_backend(backend):
        x = ndl.Tensor(np.random.default_rng(0).normal(size=(4, 3)))
        w = ndl.Tensor(np.ones((3, 2)))
        loss = ndl.ops.logsumexp(x @ w, axes=(1,)).sum()
        loss.backward()
        assert isinstance(x.realize_cached_data(), ndl.NDArray), "the storage is needle's NDArray under both"
        expected = np.float64 if backend == "np" else np.float32
        assert loss.dtype == expected and w.grad.dtype == expected and w.grad.shape == (3, 2)


def test_use_backend_restores_on_error():
    before = backend_selection.BACKEND
    with pytest.raises(ZeroDivisionError):
        with backend_selection.use_backend("np" if before == "nd" else "nd"):
            1 / 0
    assert backend_selection.BACKEND == before
    with pytest.raises(RuntimeError, match="unknown needle backend NEEDLE_BACKEND='torch'.*'nd'.*'np'"):
        with backend_selection.use_backend("torch"):
            pass
    assert backend_selection.BACKEND == before


def _run_with_backend(value, code):
    env = dict(os.environ)
    if value is None:
        env.pop("NEEDLE_BACKEND", None)
    else:
        env["NEEDLE_BACKEND"] = value
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("value, expected", [(None, "nd float32 float32"), ("nd", "nd float32 float32"), ("np", "np float64 int64")])
def test_the_environment_variable_is_read_at_import(value, expected):
    code = (
        "import os, needle as ndl\n"
        "os.environ['NEEDLE_BACKEND'] = 'nd' if ndl.backend_selection.BACKEND == 'np' else 'np'  # too late: read once\n"
        "print(ndl.backend_selection.BACKEND, ndl.Tensor([1.5]).dtype, ndl.Tensor([1, 2]).dtype)"
    )
    result = _run_with_backend(value, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected.split()


def test_an_unknown_backend_fails_at_import_naming_the_choices():
    result = _run_with_backend("cuda", "import needle")
    assert result.returncode != 0
    assert "unknown needle backend NEEDLE_BACKEND='cuda'" in result.stderr and "'np'" in result.stderr


def test_course_names():
    assert backend_selection.BACKEND in backend_selection.BACKENDS == ("nd", "np")
    assert backend_selection.array_api is ndl.backend_ndarray
    assert backend_selection.NDArray is ndl.NDArray
    assert backend_selection.Device is ndl.backend_ndarray.Device
    assert backend_selection.cpu_numpy() is ndl.cpu() is backend_selection.default_device()
    assert ndl.BACKEND == backend_selection.BACKEND
