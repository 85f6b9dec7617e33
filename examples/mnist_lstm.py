"""Sequential MNIST: an LSTM reads each 28x28 image one row (28 pixels) at a time; a linear head
classifies its last hidden state. Used by ``train_mnist.py --model lstm``. It takes ``MNISTDataset``
batches in either layout: flat rows (the default) or images (``flat=False``).

Example:
    >>> import needle as ndl
    >>> model = SequentialMNISTLSTM(hidden_size=8)
    >>> model(ndl.init.rand(5, 784)).shape
    (5, 10)
"""
import needle as ndl
from needle import nn

ROWS = COLUMNS = 28


def images_as_row_sequences(X: ndl.Tensor) -> ndl.Tensor:
    """Flat images (batch, 784), or (batch, 28, 28[, 1]), as a sequence of rows (28, batch, 28)."""
    batch = X.shape[0]
    if X.size != batch * ROWS * COLUMNS:
        raise ValueError(f"expected MNIST images of 784 pixels each, got a batch of shape {X.shape}")
    return X.reshape((batch, ROWS, COLUMNS)).transpose((0, 1))


class SequentialMNISTLSTM(nn.Module):
    """A one-layer LSTM over the 28 rows of an image and a linear head on its last hidden state.

    Args:
        hidden_size: the LSTM's hidden units.
        device, dtype: where and how the parameters are made.
    """

    def __init__(self, hidden_size: int = 128, device=None, dtype: str = "float32"):
        super().__init__()
        self.lstm = nn.LSTM(COLUMNS, hidden_size, device=device, dtype=dtype)
        self.head = nn.Linear(hidden_size, 10, device=device, dtype=dtype)

    def forward(self, X: ndl.Tensor) -> ndl.Tensor:
        _, (h_n, _) = self.lstm(images_as_row_sequences(X))
        return self.head(h_n.reshape((X.shape[0], h_n.shape[2])))
