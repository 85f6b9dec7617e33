"""The course's training helpers, with its names and signatures: CIFAR-10 epochs, training, evaluation.

Each returns ``(average accuracy, average loss)`` over the samples it saw, as the course does.
Losses may be given as a module class (``nn.SoftmaxLoss``, made once per call) or an instance.
"""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needle as ndl  # noqa: E402
from needle import nn  # noqa: E402


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

