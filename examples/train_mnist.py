#!/usr/bin/env python
"""Train an MLP, an LSTM or a CNN on MNIST with needle and report accuracy, speed and memory.

Usage::

    python examples/train_mnist.py                       # CPU, defaults below
    python examples/train_mnist.py --model lstm --epochs 3 --batch-size 64 --lr 2e-3  # rows as a sequence
    python examples/train_mnist.py --model cnn --epochs 2     # 3 Conv+BatchNorm2d+ReLU blocks
    python examples/train_mnist.py --device cuda --epochs 5
    python examples/train_mnist.py --checkpoint mnist.npz  # resumes from it if it exists
    python examples/train_mnist.py --log-dir runs/mnist      # CSV logs, history.json, training.png

With ``--checkpoint`` the run saves after every epoch and, when the file already exists, resumes
from it (``--resume`` insists on it); ``--epochs`` is then the total to reach, not the number to
add. Ctrl-C stops after the current step; with ``--checkpoint`` that state is saved, and the
line printed says how to resume.
"""
import argparse
import importlib.util
import os
import shlex
import signal
import sys
import time
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import nn, optim  # noqa: E402
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist  # noqa: E402
from trainers.callbacks.checkpoint import Checkpoint  # noqa: E402
from trainers.callbacks.loggers import CSVLogger  # noqa: E402
from trainers.monitor import MemoryMonitor  # noqa: E402
from trainers.trainer import Trainer  # noqa: E402

DEFAULT_LR = {"sgd": 0.5, "adam": 1e-3}


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " The MLP is 784-hidden-10 with ReLU; the LSTM reads the "
        "28 rows as a sequence; the CNN has three Conv+BatchNorm2d+ReLU blocks.",
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where to train: cpu, or cuda (needs CuPy and an NVIDIA GPU; default: cpu)",
    )
    parser.add_argument(
        "--epochs", type=positive_int, default=4,
        help="epochs to train; with --checkpoint, the total to reach (default: 4)",
    )
    parser.add_argument(
        "--model", choices=("mlp", "lstm", "cnn"), default="mlp",
        help="mlp, lstm over the 28 rows, or cnn (default: mlp)",
    )
    parser.add_argument(
        "--hidden", type=positive_int, default=None,
        help="hidden units of the mlp or lstm (default: 256 for mlp, 128 for lstm; the cnn has none)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=128, help="training batch size (default: 128)")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam", help="default: adam")
    parser.add_argument("--lr", type=positive_float, default=None, help="learning rate (default: 1e-3 for adam, 0.5 for sgd)")
    parser.add_argument("--momentum", type=momentum, default=0.9, help="SGD momentum, in [0, 1) (default: 0.9)")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed for weights, shuffles and dropout (default: 0)")
    parser.add_argument("--train-samples", type=positive_int, default=None, help="use only the first N training images")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--compile", action="store_true", help="capture the training step with ndl.compile and replay it"
    )
    parser.add_argument(
        "--checkpoint", metavar="PATH",
        help="save here every epoch (its folder is created); resume from it if it exists",
    )
    parser.add_argument("--resume", action="store_true", help="resume from --checkpoint, which must exist")
    parser.add_argument(
        "--log-dir", metavar="DIR", help="validate on the test set every epoch; write steps.csv and epochs.csv "
        "as it trains, then history.json, monitor.csv and training.png (the PNG needs matplotlib)"
    )
    args = parser.parse_args(argv)
    if args.resume and not args.checkpoint:
        parser.error("--resume needs --checkpoint PATH (the checkpoint to resume from)")
    if args.resume and not Path(args.checkpoint).exists():
        parser.error(f"--resume: no checkpoint at {args.checkpoint}; drop --resume to start a new run there")
    if args.checkpoint:
        prepare_checkpoint_folder(args.checkpoint, parser)
    if args.compile and int(np.__version__.split(".")[0]) < 2:
        parser.error(f"--compile needs numpy >= 2 (this is numpy {np.__version__}); upgrade numpy or drop --compile")
    if args.model == "cnn" and args.hidden is not None:
        parser.error("--hidden: the cnn has a fixed head (3136-128-10); drop --hidden, or use --model mlp or lstm")
    args.device_object = resolve_device(args.device, parser)
    return args


def argument_type(convert, accepts, wanted):
    """An argparse type: ``convert(text)`` that ``accepts`` (argparse reports a refusal before any training).

    ``wanted`` says what is expected, e.g. ``"a number in [0, 1)"``; a refusal reads
    "must be a number in [0, 1), got 1".
    """

    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    parse.__name__ = convert.__name__  # argparse names the type in its own messages
    return parse


positive_int = argument_type(int, lambda value: value >= 1, "a whole number >= 1")
positive_float = argument_type(float, lambda value: 0 < value < float("inf"), "a finite number > 0")
momentum = argument_type(float, lambda value: 0 <= value < 1, "a number in [0, 1)")


def prepare_checkpoint_folder(path, parser):
    """Create the checkpoint's folder now, as --log-dir does, so a bad path fails before training."""
    folder = Path(path).resolve().parent
    if Path(path).is_dir():
        parser.error(f"--checkpoint {path} is a folder; give a file path such as {Path(path) / 'mnist.npz'}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--checkpoint: cannot create the folder {folder} ({error.strerror or error}); choose another path")


def resolve_device(name, parser):
    """The needle device for ``--device``, or exit with what is missing and the fix."""
    if name == "cpu":
        return ndl.cpu()
    device = ndl.cuda()
    if device.enabled():
        return device
    problem = cuda_problem()
    if problem is None:
        message = (
            "--device cuda needs CuPy, which is not installed. Fix: run with --device cpu, or install "
            "CuPy: pip install 'needle-dl[cuda]' (CUDA 12; 'needle-dl[cuda13]' for CUDA 13) on a machine "
            "with an NVIDIA GPU and driver."
        )
    else:
        message = (
            f"--device cuda: CuPy is installed, but {problem}. Check that this machine has an NVIDIA "
            f"GPU and a working driver (nvidia-smi), and that the CuPy package matches the driver's CUDA "
            f"version ('needle-dl[cuda]' is CUDA 12, 'needle-dl[cuda13]' CUDA 13); or run with --device cpu."
        )
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def cuda_problem():
    """None when CuPy is not installed; otherwise why it gives no usable GPU, in words."""
    try:
        import cupy
    except ModuleNotFoundError as error:
        if error.name == "cupy":
            return None
        return f"it cannot be imported ({type(error).__name__}: {error})"
    except Exception as error:  # a broken install, or CUDA libraries missing
        return f"it cannot be imported ({type(error).__name__}: {error})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, or a driver too old for this CuPy
        return f"it finds no usable GPU or driver ({type(error).__name__}: {error})"
    return "it finds no CUDA GPU (device count 0)" if count < 1 else "needle's CUDA device reports itself disabled"


def main(argv=None):
    """Train, report, and return the test metrics (None when Ctrl-C stopped the run)."""
    args = parse_arguments(argv)
    device = args.device_object
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
    if args.log_dir:
        callbacks.append(CSVLogger(args.log_dir))
    trainer = Trainer(
        model, optimizer, monitor=monitor, progress=not args.no_progress, callbacks=callbacks, compile=args.compile
    )
    if args.checkpoint and Path(args.checkpoint).exists():
        resume_or_exit(trainer, args, device)
        print(f"resumed from {args.checkpoint} after epoch {trainer.epoch} (step {trainer.global_step})")

    print(
        f"MNIST {description} on {device}: {len(y_train)} training images, batch {args.batch_size}, "
        f"{args.optimizer} lr={lr}, {args.epochs} epochs, {blas_threads()}"
    )
    started = time.perf_counter()
    validation = test_loader if args.log_dir else None  # validation curves for the logs and the plot
    trainer.fit(train_loader, epochs=max(0, args.epochs - trainer.epoch), val_loader=validation)
    train_seconds = time.perf_counter() - started
    if trainer.interrupted:
        report_interrupt(trainer, args, argv)
        write_logs(trainer, args.log_dir)
        return None
    test = trainer.evaluate(test_loader)
    print_report(trainer, test, train_seconds)
    write_logs(trainer, args.log_dir)
    return test


def build_model(args, device):
    """The model ``--model`` names and a one-line description of it."""
    if args.model in ("lstm", "cnn") and str(Path(__file__).resolve().parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # loaded by path, not run as a script
    if args.model == "cnn":
        from mnist_models import cnn

        return cnn(device=device), "CNN (Conv+BatchNorm2d+ReLU x3, 3136-128-10 head)"
    if args.model == "lstm":
        from mnist_lstm import SequentialMNISTLSTM

        hidden = args.hidden or 128
        return SequentialMNISTLSTM(hidden, device=device), f"LSTM 28x28-{hidden}-10 (rows as steps)"
    hidden = args.hidden or 256
    model = nn.Sequential(nn.Linear(784, hidden, device=device), nn.ReLU(), nn.Linear(hidden, 10, device=device))
    return model, f"MLP 784-{hidden}-10"


def resume_or_exit(trainer, args, device):
    """Load ``--checkpoint`` into the trainer, or exit (status 2) saying which flags fit it."""
    try:
        trainer.load_checkpoint(args.checkpoint)
    except (ValueError, TypeError) as error:  # StateDictError, CheckpointError, a wrong optimizer
        flags = flags_for_checkpoint(args, device)
        advice = (
            f"it was saved with {flags}: add them to resume it" if flags
            else "it is not a checkpoint of this script's models"
        )
        details = "\n".join(line for line in str(error).splitlines() if "strict=False" not in line)  # not a CLI option
        print(
            f"train_mnist.py: error: --checkpoint {args.checkpoint} does not fit this run ({advice}, or choose "
            f"another --checkpoint path to start anew).\n{details}",
            file=sys.stderr,
        )
        sys.exit(2)


def flags_for_checkpoint(args, device):
    """The --model/--hidden/--optimizer flags whose model and optimizer match the checkpoint, or None."""
    from trainers.callbacks.checkpoint import load_checkpoint

    try:
        state = load_checkpoint(args.checkpoint)
        saved = {name: tuple(array.shape) for name, array in state["model"].items()}
        saved_optimizer = state["optimizer"]["optimizer"].lower()
    except Exception:
        return None
    sizes = sorted({size for shape in saved.values() for size in shape})
    for model in ("mlp", "lstm", "cnn"):
        for hidden in ([None] if model == "cnn" else sizes):
            trial = argparse.Namespace(**{**vars(args), "model": model, "hidden": hidden})
            candidate, _ = build_model(trial, device)
            if {name: tuple(value.shape) for name, value in candidate.state_dict().items()} == saved:
                flags = [f"--model {model}"] + ([f"--hidden {hidden}"] if hidden else [])
                return " ".join(flags + [f"--optimizer {saved_optimizer}"])
    return None


def blas_threads():
    """The BLAS thread setting in words: it changes small-batch CPU speed several times over."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(name):
            return f"BLAS threads {os.environ[name]} ({name})"
    return f"BLAS threads unset (one per core: {os.cpu_count()})"


def report_interrupt(trainer, args, argv):
    """Save the (consistent) state if asked, and say in one line where the run stopped and how to go on."""
    steps = trainer.history.steps
    in_epoch = steps[-1]["epoch"] if steps and steps[-1]["epoch"] > trainer.epoch else None
    where = f"in epoch {in_epoch}" if in_epoch else f"after epoch {trainer.epoch}"
    reached = f"interrupted {where} at step {trainer.global_step} ({trainer.epoch} of {args.epochs} epochs complete)"
    if args.checkpoint:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the save short
        try:
            trainer.save_checkpoint(args.checkpoint)
        finally:
            signal.signal(signal.SIGINT, previous)
        arguments = list(sys.argv[1:] if argv is None else argv)
        command = shlex.join(["python", sys.argv[0] if argv is None else "examples/train_mnist.py", *arguments]
                             + ([] if args.resume else ["--resume"]))
        print(f"\n{reached}; saved {args.checkpoint}; resume with: {command}", flush=True)
    else:
        print(f"\n{reached}; nothing saved (pass --checkpoint PATH to be able to resume)", flush=True)


def write_logs(trainer, log_dir):
    """history.json, monitor.csv and training.png in ``log_dir`` (the CSV logs are already there)."""
    if not log_dir:
        return
    trainer.history.to_json(Path(log_dir) / "history.json")
    trainer.monitor.to_csv(Path(log_dir) / "monitor.csv")
    written = "steps.csv, epochs.csv, history.json, monitor.csv"
    if trainer.history.steps:
        try:
            trainer.plot(Path(log_dir) / "training.png")
            written += ", training.png"
        except ImportError as error:
            written += f"; no training.png: {error}"
    print(f"logs in {log_dir}: {written}")


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
    try:
        sys.exit(0 if main() is not None else 130)  # 130: stopped by Ctrl-C, as shells report it
    except KeyboardInterrupt:  # outside training (loading data, the final test): nothing to save
        print("\ninterrupted outside training; nothing was saved", file=sys.stderr)
        sys.exit(130)
