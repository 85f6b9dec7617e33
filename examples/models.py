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
