"""ndl.compile's eager fallback for CUDA steps that cannot be captured, run on the CPU with stand-ins.

(Through ``ndl.compile``, so these need numpy >= 2 like the rest of tests/compile; the capture's
own bookkeeping, which numpy 1 also runs, is in test_cuda_graph.py.)
"""
from test_cuda_graph import NumpyProduct, _batch_norm_step, _stand_in_cupy


def test_a_capture_that_falls_back_warns_once_and_runs_that_signature_eagerly(monkeypatch):
    """What CompiledFunction does with a CUDA capture that cannot be replayed (a value read to
    the host inside the step): the eager call's result, one warning, then eager calls."""
    import numpy as np
    import pytest

    import needle as ndl
    from needle.compiler import compiled as compiled_module
    from needle.compiler.errors import EagerFallback

    calls = []

    def step(x):
        calls.append(x.shape)
        return x * 2

    def capture_that_falls_back(fn, args, kwargs, state):
        result = fn(*args, **kwargs)  # the eager call a CUDA capture starts with
        raise EagerFallback("ndl.compile: the step waited for the GPU while it was being captured", result.detach())

    monkeypatch.setattr(compiled_module, "is_cuda_argument", lambda args, kwargs: True)
    monkeypatch.setattr(compiled_module, "capture_cuda", capture_that_falls_back)
    compiled = ndl.compile(step)
    x = ndl.Tensor(np.array([1.0, 2.0], dtype=np.float32))
    with pytest.warns(ndl.EagerFallbackWarning, match="waited for the GPU"):
        first = compiled(x)
    assert first.numpy().tolist() == [2.0, 4.0] and first.op is None  # the eager result, without a graph
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: no second warning
        second = compiled(ndl.Tensor(np.array([3.0, 5.0], dtype=np.float32)))
    assert second.numpy().tolist() == [6.0, 10.0] and second.op is None
    assert len(calls) == 2 and compiled.captures == 1 and compiled.replays == 0


def test_a_step_that_runs_eagerly_keeps_its_signature_from_call_to_call(monkeypatch):
    """BatchNorm replaces its running statistics each call; the eager entry gives the old tensors
    back (holding the new values), so later calls find it instead of capturing again."""
    import sys
    import warnings

    import numpy as np

    import needle as ndl
    from needle.backend_ndarray import captured_gemm, products
    from needle.compiler import compiled as compiled_module

    model, opt, step, args = _batch_norm_step()

    def refused_while_capturing(x, y):
        loss = step(x, y)
        if products._CAPTURE is not None:  # (inside the capture run)
            raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
        return loss

    monkeypatch.setitem(sys.modules, "cupy", _stand_in_cupy())
    monkeypatch.setattr(captured_gemm, "CapturedGemm", NumpyProduct)
    monkeypatch.setattr(compiled_module, "is_cuda_argument", lambda args, kwargs: True)
    compiled = ndl.compile(refused_while_capturing)
    running_mean = model.modules[1].running_mean
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [compiled(*args).numpy().item() for _ in range(4)]
    assert [w.category for w in caught] == [ndl.EagerFallbackWarning]
    assert "cannot record (calling cuBLAS API" in str(caught[0].message)
    assert compiled.captures == 1 and compiled.replays == 0
    assert model.modules[1].running_mean is running_mean
    assert len(set(losses)) == 4  # every call trained a step
    assert np.isfinite(losses).all()


def test_a_step_whose_model_is_on_cuda_goes_to_the_cuda_capture_whatever_its_arguments(monkeypatch):
    import numpy as np
    import pytest

    import needle as ndl
    from needle.compiler import compiled as compiled_module
    from needle.compiler.errors import EagerFallback

    model = ndl.nn.Linear(2, 1)
    captured = []

    def cuda_capture(fn, args, kwargs, state):
        captured.append(state.modules)
        raise EagerFallback("ndl.compile: host data", fn(*args, **kwargs).detach())

    monkeypatch.setattr(compiled_module, "holds_cuda_state", lambda state: any(state.modules))
    monkeypatch.setattr(compiled_module, "capture_cuda", cuda_capture)
    step = ndl.compile(lambda x: model(ndl.Tensor(x)))
    with pytest.warns(ndl.EagerFallbackWarning, match="host data"):
        step(np.ones((3, 2), np.float32))
    assert captured == [[model]]
