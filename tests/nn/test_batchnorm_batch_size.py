"""BatchNorm1d refuses training batches that cannot give a variance, and leaves its statistics alone."""
import numpy as np
import pytest

import needle as ndl
from needle import nn


@pytest.mark.parametrize("batch", [0, 1])
def test_a_training_batch_of_fewer_than_two_raises_and_keeps_the_statistics(batch):
    bn = nn.BatchNorm1d(3)
    bn(ndl.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
    mean, var = bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()
    with pytest.raises(ValueError, match=rf"at least 2 samples.*shape \({batch}, 3\).*model.eval\(\)"):
        bn(ndl.Tensor(np.ones((batch, 3), np.float32)))
    np.testing.assert_array_equal(bn.running_mean.numpy(), mean)
    np.testing.assert_array_equal(bn.running_var.numpy(), var)
    assert np.all(np.isfinite(bn.running_var.numpy()))


def test_one_sample_in_eval_mode_uses_the_running_statistics():
    bn = nn.BatchNorm1d(2)
    bn.eval()
    out = bn(ndl.Tensor([[1.0, -1.0]]))
    np.testing.assert_allclose(out.numpy(), [[1.0, -1.0]] / np.sqrt(1 + 1e-5), rtol=1e-6)
