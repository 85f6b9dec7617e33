"""Loss modules."""
from .. import ops
from .module import Module


class SoftmaxLoss(Module):
    """Mean softmax cross-entropy of logits (batch, classes) against integer labels (batch,).

    One fused node, stable for very large logits. Labels are class ids: an integer dtype (the
    DataLoader's uint8 MNIST labels), or floats that are all whole numbers (``ndl.Tensor([0, 2])``
    is float32). A float label that is not a whole number (1.7, -0.5, NaN) raises ValueError; a
    label outside ``[0, classes)`` raises an IndexError on the CPU. Integer labels on a GPU are
    not range-checked (that would wait for the GPU every step): an out-of-range label there
    makes the loss NaN. See :func:`needle.ops.softmax_cross_entropy`.

    Example:
        >>> import needle as ndl
        >>> loss = ndl.nn.SoftmaxLoss()(ndl.Tensor([[1e5, 0.0]]), ndl.Tensor([0], dtype="int64"))
        >>> loss.item()
        0.0
    """

    def forward(self, logits, y):
        return ops.softmax_cross_entropy(logits, y)


CrossEntropyLoss = SoftmaxLoss
"""PyTorch's name for ``SoftmaxLoss``: the same class, so ``nn.CrossEntropyLoss()(logits, y)``
takes the same arguments (logits of shape (batch, classes), integer class labels of shape (batch,))."""
