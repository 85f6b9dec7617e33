"""``ndl.set_flush_denormal``: the thread's CPU arithmetic flushes subnormal floats, or keeps them.

CI sets ``NEEDLE_REQUIRE_C_EXTENSIONS=1``: there the extension must have been built, so the
checks of the mode itself cannot pass by skipping.
"""
import os
import platform
import threading

import numpy as np
import pytest

import needle as ndl
from needle import denormals

SUBNORMAL32 = np.float32(1e-39)
SUBNORMAL64 = np.float64(1e-310)
settable = pytest.mark.skipif(
    denormals._denormals is None or not denormals._denormals.supported(),
    reason="the denormal mode cannot be set here (extension not built, or another CPU)",
)


@pytest.fixture(autouse=True)
def restore_mode():
    before = ndl.is_flush_denormal_enabled()
    yield
    denormals.set_flush_denormal(before)


def test_ci_builds_the_extension():
    if os.environ.get("NEEDLE_REQUIRE_C_EXTENSIONS") != "1":
        pytest.skip("only where NEEDLE_REQUIRE_C_EXTENSIONS=1 (CI)")
    assert denormals._denormals is not None
    if platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64"):
        assert denormals._denormals.supported()


@settable
def test_flushing_reads_and_makes_subnormals_as_zero():
    assert SUBNORMAL32 > 0 and SUBNORMAL32 < np.finfo(np.float32).tiny
    assert ndl.set_flush_denormal(True) is True
    assert ndl.is_flush_denormal_enabled()
    assert float(SUBNORMAL32 * np.float32(1)) == 0.0
    assert float(SUBNORMAL64 * np.float64(1)) == 0.0
    smallest_normal = np.finfo(np.float32).tiny
    assert float(np.float32(smallest_normal) / np.float32(2)) == 0.0  # a subnormal result
    assert float(np.float32(smallest_normal) * np.float32(2)) == float(smallest_normal) * 2  # normals untouched

    assert ndl.set_flush_denormal(False) is True
    assert not ndl.is_flush_denormal_enabled()
    assert float(SUBNORMAL32 * np.float32(1)) == float(SUBNORMAL32)
    assert float(np.float32(smallest_normal) / np.float32(2)) > 0


@settable
def test_the_mode_belongs_to_the_thread():
    ndl.set_flush_denormal(False)
    seen = {}

    def other():
        seen["set"] = ndl.set_flush_denormal(True)
        seen["product"] = float(SUBNORMAL32 * np.float32(1))

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert seen == {"set": True, "product": 0.0}
    assert not ndl.is_flush_denormal_enabled()
    assert float(SUBNORMAL32 * np.float32(1)) == float(SUBNORMAL32)


@settable
def test_a_momentum_velocity_decays_to_zero_without_subnormals():
    """What the switch is for: a velocity that gets no more gradient decays through the subnormals."""
    weight = ndl.nn.Parameter(ndl.Tensor(np.ones(4, dtype=np.float32)))
    opt = ndl.optim.SGD([weight], lr=0.1, momentum=0.5)

    def velocities_after(steps):
        weight.grad = ndl.Tensor(np.full(4, 1e-30, dtype=np.float32))
        opt.step()
        values = []
        for _ in range(steps):
            weight.grad = ndl.Tensor(np.zeros(4, dtype=np.float32))
            opt.step()
            values.append(np.asarray(opt.u[weight])[0])
        return np.array(values)

    ndl.set_flush_denormal(False)
    ieee = velocities_after(40)
    assert np.any((ieee > 0) & (ieee < np.finfo(np.float32).tiny))
    opt.u.clear()
    ndl.set_flush_denormal(True)
    flushed = velocities_after(40)
    assert not np.any((flushed > 0) & (flushed < np.finfo(np.float32).tiny))
    assert flushed[-1] == 0 and flushed[0] > 0


@pytest.mark.parametrize("mode", [1, 0, "yes", None, 1.0])
def test_a_mode_that_is_not_a_bool_is_refused_and_changes_nothing(mode):
    before = ndl.is_flush_denormal_enabled()
    with pytest.raises(TypeError, match="takes True .* or False"):
        ndl.set_flush_denormal(mode)
    assert ndl.is_flush_denormal_enabled() == before


def test_without_the_extension_it_reports_false(monkeypatch):
    monkeypatch.setattr(denormals, "_denormals", None)
    assert ndl.set_flush_denormal(True) is False
    assert ndl.set_flush_denormal(False) is False
    assert ndl.is_flush_denormal_enabled() is False
