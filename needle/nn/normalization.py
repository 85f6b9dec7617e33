"""Normalisation layers: BatchNorm1d and BatchNorm2d (batch statistics, running averages) and LayerNorm1d."""
from .. import init
from ..autograd import Tensor
from ..backend_ndarray import NDArray
from .layers import _positive_int
from .module import Module, Parameter


def _check_features(layer, x):
    if len(x.shape) != 2 or x.shape[1] != layer.dim:
        raise ValueError(f"{type(layer).__name__}({layer.dim}) needs input of shape (batch, {layer.dim}), got {x.shape}")


class BatchNorm1d(Module):
    """Normalise each feature over the batch, then scale by ``weight`` and shift by ``bias``.

    Training uses the batch mean and biased batch variance and updates the running statistics
    ``running = (1 - momentum) * running + momentum * batch_statistic`` (outside the graph);
    evaluation normalises with the running statistics. Training needs at least 2 samples a
    batch (a ValueError otherwise, as in PyTorch).

    Args:
        dim: number of features.
        eps: added to the variance before the square root.
        momentum: weight of the new batch in the running statistics.

    Example:
        >>> import needle as ndl
        >>> bn = ndl.nn.BatchNorm1d(2)
        >>> y = bn(ndl.Tensor([[1.0, 2.0], [3.0, 6.0]]))
        >>> y.numpy().round(3).tolist()
        [[-1.0, -1.0], [1.0, 1.0]]
        >>> [round(m, 3) for m in bn.running_mean.numpy().tolist()]
        [0.2, 0.4]
    """

    buffer_names = ("running_mean", "running_var")

    def __init__(self, dim, eps=1e-5, momentum=0.1, device=None, dtype="float32"):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.momentum = momentum
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))
        self.running_mean = init.zeros(dim, device=device, dtype=dtype, requires_grad=False)
        self.running_var = init.ones(dim, device=device, dtype=dtype, requires_grad=False)

    def forward(self, x):
        _check_features(self, x)
        dim = self.dim
        weight = self.weight.reshape((1, dim))
        bias = self.bias.reshape((1, dim))
        if not self.training:
            running_mean = self.running_mean.realize_cached_data()
            inverse_std = (self.running_var.realize_cached_data() + self.eps) ** -0.5
            centered = x - Tensor.make_const(running_mean.reshape((1, dim)))
            return centered * Tensor.make_const(inverse_std.reshape((1, dim))) * weight + bias
        batch = x.shape[0]
        if batch < 2:
            # NOTE: as PyTorch: one sample has variance 0 (the output would be all zeros, the
            # running variance pulled toward 0), and no sample gives NaN statistics for good.
            raise ValueError(
                f"BatchNorm1d({dim}) in training needs a batch of at least 2 samples to estimate "
                f"the variance, got input of shape {tuple(x.shape)}; the running statistics were "
                f"not changed. Use batches of 2 or more (DataLoader(..., drop_last=True) drops a "
                f"short last batch), or call model.eval() to use the running statistics"
            )
        mean = x.sum((0,)) / batch
        centered = x - mean.reshape((1, dim))
        variance = (centered * centered).sum((0,)) / batch
        normalized = centered / ((variance + self.eps) ** 0.5).reshape((1, dim))
        self._update_running(mean.realize_cached_data(), variance.realize_cached_data())
        return normalized * weight + bias

    def _update_running(self, mean: NDArray, variance: NDArray):
        """Blend the batch statistics into the running ones on plain arrays (no graph)."""
        momentum = self.momentum
        keep = 1 - momentum
        device = mean.device
        new_mean = self.running_mean.realize_cached_data().raw * keep + mean.raw * momentum
        new_var = self.running_var.realize_cached_data().raw * keep + variance.raw * momentum
        self.running_mean = Tensor.make_const(NDArray.wrap(new_mean, device))
        self.running_var = Tensor.make_const(NDArray.wrap(new_var, device))

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm2d(BatchNorm1d):
    """BatchNorm1d over the channels of NCHW images: statistics per channel over (N, H, W).

    The course's semantics: the image batch is viewed as ``(N * H * W, C)`` rows and normalised
    as BatchNorm1d does (same parameters, running statistics and ``momentum``).

    Args:
        dim: number of channels (axis 1 of the input).
        eps: added to the variance before the square root.
        momentum: weight of the new batch in the running statistics.

    Example:
        >>> import numpy as np, needle as ndl
        >>> bn = ndl.nn.BatchNorm2d(2)
        >>> x = ndl.Tensor(np.arange(16.0).reshape(2, 2, 2, 2))
        >>> y = bn(x).numpy()
        >>> y.shape, [round(float(y[:, c].mean()), 6) for c in range(2)]
        ((2, 2, 2, 2), [0.0, 0.0])
        >>> [round(m, 3) for m in bn.running_mean.numpy().tolist()]
        [0.55, 0.95]
    """

    def forward(self, x):
        if len(x.shape) != 4 or x.shape[1] != self.dim:
            raise ValueError(
                f"BatchNorm2d({self.dim}) needs NCHW input of shape (batch, {self.dim}, height, width), got {x.shape}"
            )
        batch, channels, height, width = x.shape
        # NOTE: NCHW -> NHWC by two swaps, so that each row of the reshape is one pixel's channels.
        rows = x.transpose((1, 2)).transpose((2, 3)).reshape((batch * height * width, channels))
        out = super().forward(rows)
        return out.reshape((batch, height, width, channels)).transpose((2, 3)).transpose((1, 2))


class LayerNorm1d(Module):
    """Normalise each row over its features, then scale by ``weight`` and shift by ``bias``.

    Example:
        >>> import needle as ndl
        >>> ln = ndl.nn.LayerNorm1d(2)
        >>> ln(ndl.Tensor([[1.0, 3.0]])).numpy().round(3).tolist()
        [[-1.0, 1.0]]
    """

    def __init__(self, dim, eps=1e-5, device=None, dtype="float32"):
        super().__init__()
        self.dim = _positive_int(dim, "dim", "LayerNorm1d")
        self.eps = eps
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))

    def forward(self, x):
        _check_features(self, x)
        batch, dim = x.shape
        mean = (x.sum((1,)) / dim).reshape((batch, 1))
        centered = x - mean
        variance = ((centered * centered).sum((1,)) / dim).reshape((batch, 1))
        normalized = centered / (variance + self.eps) ** 0.5
        return normalized * self.weight.reshape((1, dim)) + self.bias.reshape((1, dim))

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"
