"""The course's MLP-ResNet for MNIST (hw2), with the course's names and signatures.

Import it (``from mlp_resnet import MLPResNet, epoch, train_mnist``) or run it::

    python examples/mlp_resnet.py                    # 10 epochs on the shipped MNIST
    python examples/mlp_resnet.py --epochs 2 --hidden-dim 64

It prints the four figures ``train_mnist`` returns: train error, train loss, test error, test loss.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needle as ndl  # noqa: E402
import needle.nn as nn  # noqa: E402
from needle.data import DataLoader, MNISTDataset, mnist  # noqa: E402


def ResidualBlock(dim, hidden_dim, norm=nn.BatchNorm1d, drop_prob=0.1):
    """Linear → norm → ReLU → Dropout → Linear → norm, added to its input, then ReLU."""
    return nn.Sequential(
        nn.Residual(
            nn.Sequential(
                nn.Linear(dim, hidden_dim),
                norm(hidden_dim),
                nn.ReLU(),
                nn.Dropout(drop_prob),
                nn.Linear(hidden_dim, dim),
                norm(dim),
            )
        ),
        nn.ReLU(),
    )


def MLPResNet(dim, hidden_dim=100, num_blocks=3, num_classes=10, norm=nn.BatchNorm1d, drop_prob=0.1):
    """Linear(dim, hidden_dim) → ReLU → ``num_blocks`` residual blocks (inner width hidden_dim // 2)
    → Linear(hidden_dim, num_classes).

    Example:
        >>> model = MLPResNet(784, hidden_dim=16, num_blocks=2)
        >>> model(ndl.init.rand(4, 784)).shape
        (4, 10)
    """
    # NOTE: the layers are made in the order they run (first Linear, blocks, last Linear), as the
    # course does, so that under numpy.random.seed the weights are drawn to the course's values.
    first = nn.Linear(dim, hidden_dim)
    blocks = [ResidualBlock(hidden_dim, hidden_dim // 2, norm=norm, drop_prob=drop_prob) for _ in range(num_blocks)]
    last = nn.Linear(hidden_dim, num_classes)
    return nn.Sequential(first, nn.ReLU(), *blocks, last)


def epoch(dataloader, model, opt=None):
    """One pass over ``dataloader``: trains with ``opt`` (model in train mode), else evaluates
    (eval mode, under ``no_grad``).

    Returns:
        ``(error rate, mean loss)``: the fraction of samples misclassified and the mean of the
        per-batch losses, as the course computes them.
    """
    np.random.seed(4)
    loss_fn = nn.SoftmaxLoss()
    training = opt is not None
    model.train() if training else model.eval()
    errors, samples, losses = 0, 0, []
    with ndl.set_grad_enabled(training):
        for X, y in dataloader:  # MNISTDataset's rows of 784 values go straight into the first Linear
            logits = model(X)
            loss = loss_fn(logits, y)
            if training:
                opt.reset_grad()
                loss.backward()
                opt.step()
            errors += int((logits.numpy().argmax(axis=1) != y.numpy()).sum())
            samples += y.shape[0]
            losses.append(float(loss.numpy()))
    return errors / samples, float(np.mean(losses))


def train_mnist(
    batch_size=100,
    epochs=10,
    optimizer=ndl.optim.Adam,
    lr=0.001,
    weight_decay=0.001,
    hidden_dim=100,
    data_dir="data",
):
    """Train an MLPResNet(784, hidden_dim) on MNIST and evaluate it on the test set.

    ``data_dir`` is looked in first for the four IDX files; the copy that ships with needle is
    used when they are not there, so the course's default ``"data"`` works from any folder.

    Returns:
        ``(train error, train loss, test error, test loss)``: the last training epoch's figures
        and the test set's.
    """
    np.random.seed(4)
    files = mnist(root=data_dir, download=False)
    train = MNISTDataset(str(files.train_images), str(files.train_labels))
    test = MNISTDataset(str(files.test_images), str(files.test_labels))
    train_loader = DataLoader(train, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test, batch_size=batch_size)
    model = MLPResNet(784, hidden_dim=hidden_dim)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    train_error = train_loss = None
    for _ in range(epochs):
        train_error, train_loss = epoch(train_loader, model, opt)
    test_error, test_loss = epoch(test_loader, model)
    return train_error, train_loss, test_error, test_loss


def main():
    parser = argparse.ArgumentParser(description="Train the course's MLP-ResNet on MNIST.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--hidden-dim", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--data-dir", default="data")
    args = parser.parse_args()
    figures = train_mnist(args.batch_size, args.epochs, ndl.optim.Adam, args.lr, 0.001, args.hidden_dim, args.data_dir)
    for name, value in zip(("train error", "train loss", "test error", "test loss"), figures):
        print(f"{name}: {value:.4f}")


if __name__ == "__main__":
    main()
