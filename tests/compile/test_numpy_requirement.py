"""ndl.compile needs numpy 2: on numpy 1 every way in is refused with the fix, before anything runs."""
import numpy as np
import pytest

import needle as ndl
from needle.compiler.compiled import NUMPY_MAJOR
from trainers import Trainer


def _model_and_step():
    model = ndl.nn.Linear(3, 2)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.reset_grad()
        loss = ndl.nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step


@pytest.mark.skipif(NUMPY_MAJOR >= 2, reason="numpy 2 is supported: the refusal applies to numpy 1 only")
def test_numpy_1_is_refused_naming_the_fix_and_nothing_changes():
    model, step = _model_and_step()
    before = model.weight.numpy().copy()
    compiled = ndl.compile(step)  # decorating is fine; the call is refused
    x, y = ndl.Tensor(np.ones((4, 3), dtype=np.float32)), ndl.Tensor([0, 1, 0, 1], dtype="int64")
    with pytest.raises(ndl.CaptureError, match=r"needs numpy >= 2 .*pip install 'numpy>=2'"):
        compiled(x, y)
    np.testing.assert_array_equal(model.weight.numpy(), before)
    assert compiled.captures == 0
    with pytest.raises(ndl.CaptureError, match="compile=False"):
        Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), compile=True, progress=False)


@pytest.mark.skipif(NUMPY_MAJOR < 2, reason="numpy 1 is refused (the other test)")
def test_numpy_2_is_accepted():
    from needle.compiler.compiled import require_supported_numpy

    require_supported_numpy()
    model, step = _model_and_step()
    x, y = ndl.Tensor(np.ones((4, 3), dtype=np.float32)), ndl.Tensor([0, 1, 0, 1], dtype="int64")
    compiled = ndl.compile(step)
    compiled(x, y)
    compiled(x, y)
    assert compiled.captures == 1 and compiled.replays == 1
