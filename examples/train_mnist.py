#!/usr/bin/env python
"""Train an MLP (784 -> hidden -> 10, ReLU) or a CNN on MNIST with needle; report accuracy, speed and memory.

Usage::

    python examples/train_mnist.py                       # CPU, defaults below
    python examples/train_mnist.py --model cnn --epochs 2     # 3 Conv+BatchNorm2d+ReLU blocks
    python examples/train_mnist.py --device cuda --epochs 5
    python examples/train_mnist.py --checkpoint mnist.npz  # resumes from it if it exists

With ``--checkpoint`` the run saves after every epoch and, when the file already exists, resumes
from it; ``--epochs`` is then the total to reach, not the number to add.
"""
import argparse
import importlib.util
import sys
import time
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import nn, optim  # noqa: E402
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist  # noqa: E402
from trainers.checkpoint import Checkpoint  # noqa: E402
from trainers.monitor import MemoryMonitor  # noqa: E402
from trainers.trainer import Trainer  # noqa: E402

DEFAULT_LR = {"sgd": 0.5, "adam": 1e-3}


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="mlp, or cnn (default: mlp)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs to train (default: 4)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden units (default: 256)")
    parser.add_argument("--batch-size", type=int, default=128, help="default: 128")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    parser.add_argument("--lr", type=float, default=None, help="default: 1e-3 for adam, 0.5 for sgd")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-samples", type=int, default=None, help="use only the first N training images")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--checkpoint", metavar="PATH", help="save here every epoch; resume from it if it exists")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_arguments(argv)
    device = ndl.cpu() if args.device == "cpu" else ndl.cuda()
    np.random.seed(args.seed)

    files = mnist()
    X_train, y_train = parse_mnist(files.train_images, files.train_labels)
    X_test, y_test = parse_mnist(files.test_images, files.test_labels)
    if args.train_samples is not None:
        X_train, y_train = X_train[: args.train_samples], y_train[: args.train_samples]
    train_loader = DataLoader(NDArrayDataset(X_train, y_train), args.batch_size, shuffle=True, device=device)
    test_loader = DataLoader(NDArrayDataset(X_test, y_test), 1000, device=device)

    model, description = build_model(args, device)
    lr = DEFAULT_LR[args.optimizer] if args.lr is None else args.lr
    if args.optimizer == "sgd":
        optimizer = optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    else:
        optimizer = optim.Adam(model.parameters(), lr=lr)
    monitor = MemoryMonitor(device=device if args.device == "cuda" else None)
    callbacks = [Checkpoint(args.checkpoint)] if args.checkpoint else []
    trainer = Trainer(model, optimizer, monitor=monitor, progress=not args.no_progress, callbacks=callbacks)
    if args.checkpoint and Path(args.checkpoint).exists():
        trainer.load_checkpoint(args.checkpoint)
        print(f"resumed from {args.checkpoint} after epoch {trainer.epoch} (step {trainer.global_step})")

    print(
        f"MNIST {description} on {device}: {len(y_train)} training images, batch {args.batch_size}, "
        f"{args.optimizer} lr={lr}, {args.epochs} epochs"
    )
    started = time.perf_counter()
    trainer.fit(train_loader, epochs=max(0, args.epochs - trainer.epoch))
    train_seconds = time.perf_counter() - started
    test = trainer.evaluate(test_loader)
    print_report(trainer, test, train_seconds)
    return test


def build_model(args, device):
    """The model ``--model`` names and a one-line description of it."""
    if args.model == "cnn":
        if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path, not run as a script
            sys.path.insert(0, str(Path(__file__).resolve().parent))
        from mnist_models import cnn

        return cnn(device=device), "CNN (Conv+BatchNorm2d+ReLU x3, 3136-128-10 head)"
    hidden = args.hidden
    model = nn.Sequential(nn.Linear(784, hidden, device=device), nn.ReLU(), nn.Linear(hidden, 10, device=device))
    return model, f"MLP 784-{args.hidden}-10"


def print_report(trainer, test, train_seconds):
    """Test accuracy, speed, and the peaks of graph nodes and memory over the run."""
    epochs = trainer.history.epochs
    steps = trainer.history.steps
    seconds = [entry["seconds"] for entry in epochs]
    records = trainer.monitor.history
    print()
    print(f"test accuracy        {test['accuracy']:.2%}  (loss {test['loss']:.4f})")
    if seconds:
        print(f"seconds per epoch    {np.mean(seconds):.2f}  ({len(seconds)} epochs, {train_seconds:.1f} s this run)")
    if steps:
        print(f"peak live graph nodes {max(entry['live_nodes'] for entry in steps)} (between steps)")
        print(f"peak tensor memory   {max(entry['memory_bytes'] for entry in steps) / 2**20:.1f} MB")
    device_peak = max((record.device_memory_peak for record in records), default=0)
    if device_peak:
        print(f"peak device memory   {device_peak / 2**20:.1f} MB")
    print()
    print(trainer.monitor.summary())


if __name__ == "__main__":
    main()
