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


def _loss_module(loss_fn):
    """An instance of ``loss_fn`` when given the class (the course passes both)."""
    return loss_fn() if isinstance(loss_fn, type) else loss_fn


# ---- CIFAR-10 ----------------------------------------------------------------------------------
def epoch_general_cifar10(dataloader, model, loss_fn=nn.SoftmaxLoss, opt=None):
    """One pass over ``dataloader``: training when ``opt`` is given, else evaluation.

    With an optimizer the model is put in training mode and every batch takes one step;
    without, the model is put in evaluation mode and the pass runs under ``ndl.no_grad()``.

    Args:
        dataloader: yields ``(images, labels)`` batches (e.g. ``ndl.data.DataLoader``).
        model: a module mapping images to logits (batch, classes).
        loss_fn: the loss, a module class or instance (default ``nn.SoftmaxLoss``).
        opt: a ``needle.optim`` optimizer, or None to evaluate.

    Returns:
        ``(avg_acc, avg_loss)``: accuracy and loss averaged over samples.

    Example:
        >>> import numpy as np, needle as ndl
        >>> from needle import nn
        >>> data = ndl.data.NDArrayDataset(np.eye(4, dtype=np.float32), np.arange(4, dtype=np.uint8))
        >>> loader = ndl.data.DataLoader(data, batch_size=2)
        >>> np.random.seed(0)
        >>> model = nn.Linear(4, 4)
        >>> opt = ndl.optim.SGD(model.parameters(), lr=1.0)
        >>> accuracy, loss = epoch_general_cifar10(loader, model, opt=opt)
        >>> 0.0 <= accuracy <= 1.0 and loss > 0
        True
    """
    loss_module = _loss_module(loss_fn)
    training = opt is not None
    if training:
        model.train()
    else:
        model.eval()
    samples = correct = loss_total = 0.0
    with ndl.set_grad_enabled(training):
        for images, labels in dataloader:
            logits = model(images)
            loss = loss_module(logits, labels)
            if training:
                opt.reset_grad()
                loss.backward(create_graph=False)  # NOTE: plain-array gradients, the fast path
                opt.step()
            size = labels.shape[0]
            samples += size
            correct += float((logits.numpy().argmax(axis=1) == labels.numpy()).sum())
            loss_total += float(loss.numpy()) * size
    if not samples:
        raise ValueError("epoch_general_cifar10 got a dataloader that yielded no batches")
    return correct / samples, loss_total / samples


def train_cifar10(
    model,
    dataloader,
    n_epochs=1,
    optimizer=ndl.optim.Adam,
    lr=0.001,
    weight_decay=0.001,
    loss_fn=nn.SoftmaxLoss,
):
    """Train ``model`` for ``n_epochs`` with ``optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)``.

    Returns:
        ``(avg_acc, avg_loss)`` of the last training epoch.
    """
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_module = _loss_module(loss_fn)
    avg_acc = avg_loss = None
    for _ in range(n_epochs):
        avg_acc, avg_loss = epoch_general_cifar10(dataloader, model, loss_module, opt=opt)
    return avg_acc, avg_loss


def evaluate_cifar10(model, dataloader, loss_fn=nn.SoftmaxLoss):
    """Accuracy and loss of ``model`` over ``dataloader`` in evaluation mode.

    Returns:
        ``(avg_acc, avg_loss)``.
    """
    return epoch_general_cifar10(dataloader, model, _loss_module(loss_fn), opt=None)

