"""The course's training helpers (``examples/simple_ml.py``): an epoch, a training run, an evaluation."""
import importlib.util
import sys
from pathlib import Path
from typing import Optional, Tuple, Union

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import nn  # noqa: E402


# ---- Penn Treebank language models ---------------------------------------------------------------
def detach_state(h: Union[None, ndl.Tensor, Tuple[ndl.Tensor, ...]]):
    """The carried hidden state without its graph: a Tensor, a tuple such as an LSTM's (h, c), or None.

    Truncated back-propagation through time: the next batch starts from the state's values,
    and this batch's graph can be freed.
    """
    if h is None:
        return None
    if isinstance(h, (tuple, list)):
        return tuple(state.detach() for state in h)
    return h.detach()


def epoch_general_ptb(
    data: np.ndarray,
    model: nn.Module,
    seq_len: int = 40,
    loss_fn: nn.Module = nn.SoftmaxLoss(),
    opt: Optional[ndl.optim.Optimizer] = None,
    clip: Optional[float] = None,
    device=None,
    dtype: str = "float32",
) -> Tuple[float, float]:
    """One pass over ``batchify``'s array ``data`` (nbatch, batch_size) in windows of ``seq_len`` words.

    Trains when ``opt`` is given (``clip``: the largest total gradient norm), else evaluates.
    The hidden state is carried from window to window, detached. Returns (average accuracy,
    average loss) over all predicted words.

    Example:
        >>> import numpy as np, needle as ndl
        >>> from models import LanguageModel
        >>> data = ndl.data.batchify(list(np.arange(200) % 7), 4)
        >>> model = LanguageModel(4, 7, 8, seq_model="lstm")
        >>> accuracy, loss = epoch_general_ptb(data, model, seq_len=10, opt=ndl.optim.Adam(model.parameters(), lr=0.01))
        >>> 0 <= accuracy <= 1 and loss > 0
        True
    """
    np.random.seed(4)
    model.train() if opt is not None else model.eval()
    nbatch = data.shape[0]
    h = None
    correct = loss_sum = words = 0.0
    for i in range(0, nbatch - 1, seq_len):
        X, y = ndl.data.get_batch(data, i, seq_len, device=device, dtype=dtype)
        if opt is None:
            with ndl.no_grad():
                scores, h = model(X, h)
                loss = loss_fn(scores, y)
        else:
            scores, h = model(X, h)
            loss = loss_fn(scores, y)
            opt.reset_grad()
            loss.backward(create_graph=False)
            if clip is not None:
                ndl.optim.clip_grad_norm(model.parameters(), clip)
            opt.step()
        h = detach_state(h)
        count = y.shape[0]
        correct += float((scores.numpy().argmax(axis=1) == y.numpy()).sum())
        loss_sum += loss.item() * count
        words += count
    return correct / words, loss_sum / words


def train_ptb(
    model: nn.Module,
    data: np.ndarray,
    seq_len: int = 40,
    n_epochs: int = 1,
    optimizer=ndl.optim.SGD,
    lr: float = 4.0,
    weight_decay: float = 0.0,
    loss_fn=nn.SoftmaxLoss,
    clip: Optional[float] = None,
    device=None,
    dtype: str = "float32",
) -> Tuple[float, float]:
    """Train ``model`` for ``n_epochs`` on ``data``; ``optimizer`` and ``loss_fn`` are classes.

    Returns (average accuracy, average loss) of the last epoch.
    """
    np.random.seed(4)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    accuracy = loss = None
    for _ in range(n_epochs):
        accuracy, loss = epoch_general_ptb(data, model, seq_len, loss_fn(), opt, clip, device, dtype)
    return accuracy, loss


def evaluate_ptb(
    model: nn.Module, data: np.ndarray, seq_len: int = 40, loss_fn=nn.SoftmaxLoss, device=None, dtype: str = "float32"
) -> Tuple[float, float]:
    """(average accuracy, average loss) of ``model`` on ``data``, without training."""
    np.random.seed(4)
    return epoch_general_ptb(data, model, seq_len, loss_fn(), None, None, device, dtype)
