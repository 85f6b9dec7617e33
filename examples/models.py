"""The course's example models (``examples/models.py``)."""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needle as ndl  # noqa: E402
from needle import nn  # noqa: E402


# ---- language model (Penn Treebank) --------------------------------------------------------------
class LanguageModel(nn.Module):
    """Embedding, then an RNN or LSTM, then a linear layer to word scores, as the course's.

    Args:
        embedding_size: size of each word vector.
        output_size: the vocabulary size (words in and scores out).
        hidden_size: hidden units of the sequence model.
        num_layers: layers of the sequence model.
        seq_model: ``'rnn'`` or ``'lstm'``.
        seq_len: the sequence length the model is trained on (kept for the course's signature).
        device, dtype: where and how the parameters are made.

    ``forward(x, h=None)`` takes word indices (seq_len, batch) and the carried state and returns
    ``(scores, h)``: scores (seq_len * batch, output_size), and the state to carry (an RNN's h_n,
    an LSTM's (h_n, c_n)).

    Example:
        >>> import needle as ndl
        >>> model = LanguageModel(8, 20, 16, num_layers=2, seq_model="lstm")
        >>> scores, (h, c) = model(ndl.Tensor([[1.0, 2.0, 3.0]] * 5))
        >>> scores.shape, h.shape
        ((15, 20), (2, 3, 16))
    """

    def __init__(
        self,
        embedding_size: int,
        output_size: int,
        hidden_size: int,
        num_layers: int = 1,
        seq_model: str = "rnn",
        seq_len: int = 40,
        device=None,
        dtype: str = "float32",
    ):
        super().__init__()
        if seq_model not in ("rnn", "lstm"):
            raise ValueError(f"seq_model must be 'rnn' or 'lstm', got seq_model={seq_model!r}")
        self.seq_len, self.hidden_size = seq_len, hidden_size
        self.embedding = nn.Embedding(output_size, embedding_size, device=device, dtype=dtype)
        sequence = nn.RNN if seq_model == "rnn" else nn.LSTM
        self.seq_model = sequence(embedding_size, hidden_size, num_layers, device=device, dtype=dtype)
        self.linear = nn.Linear(hidden_size, output_size, device=device, dtype=dtype)

    def forward(self, x: ndl.Tensor, h=None):
        seq_len, batch = x.shape
        output, h = self.seq_model(self.embedding(x), h)
        return self.linear(output.reshape((seq_len * batch, self.hidden_size))), h


# ---- ResNet9 (CIFAR-10) -------------------------------------------------------------------------
class ConvBN(nn.Module):
    """``Conv`` then ``BatchNorm2d`` then ``ReLU``: the course's building block (NCHW in and out).

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: side of the square kernel ("same" padding ``kernel_size // 2``).
        stride: step between windows.
        device: where the parameters live.
        dtype: parameter element type.

    Example:
        >>> block = ConvBN(3, 8, 3, stride=2)
        >>> block(ndl.init.rand(2, 3, 8, 8)).shape
        (2, 8, 4, 4)
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, device=None, dtype="float32"
    ):
        super().__init__()
        self.conv = nn.Conv(in_channels, out_channels, kernel_size, stride=stride, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(out_channels, device=device, dtype=dtype)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class ResNet9(nn.Module):
    """The course's ResNet9 for 3 x 32 x 32 images (CIFAR-10), 10 logits out.

    ConvBN blocks 3->16 (k7, s4), 16->32 (k3, s2), a residual pair 32->32, 32->64 (s2),
    64->128 (s2), a residual pair 128->128, then Flatten, Linear 128->128, ReLU, Linear 128->10.

    Args:
        device: where the parameters live.
        dtype: parameter element type.

    Example:
        >>> import numpy as np
        >>> np.random.seed(0)
        >>> model = ResNet9()
        >>> model(ndl.init.rand(2, 3, 32, 32)).shape
        (2, 10)
        >>> sum(int(np.prod(p.shape)) for p in model.parameters())
        431946
    """

    def __init__(self, device=None, dtype="float32"):
        super().__init__()

        def block(in_channels, out_channels, kernel_size, stride):
            return ConvBN(in_channels, out_channels, kernel_size, stride, device=device, dtype=dtype)

        self.model = nn.Sequential(
            block(3, 16, 7, 4),
            block(16, 32, 3, 2),
            nn.Residual(nn.Sequential(block(32, 32, 3, 1), block(32, 32, 3, 1))),
            block(32, 64, 3, 2),
            block(64, 128, 3, 2),
            nn.Residual(nn.Sequential(block(128, 128, 3, 1), block(128, 128, 3, 1))),
            nn.Flatten(),
            nn.Linear(128, 128, device=device, dtype=dtype),
            nn.ReLU(),
            nn.Linear(128, 10, device=device, dtype=dtype),
        )

    def forward(self, x):
        return self.model(x)
