"""Trainer: fit and evaluate on a small MNIST subset, history contents, NaN stops, progress bar."""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist
from trainers.callbacks import Callback
from trainers.monitor import MemoryMonitor
from trainers.callbacks.progress import ProgressBar
from trainers.trainer import NonFiniteLossError, Trainer
from example_scripts import load_example


@pytest.fixture(scope="module")
def mnist_subset():
    """The first 2,000 training images for training and the first 1,000 test images, flattened."""
    files = mnist(download=False)
    X, y = parse_mnist(files.train_images, files.train_labels)
    X_test, y_test = parse_mnist(files.test_images, files.test_labels)
    return (X[:2000], y[:2000]), (X_test[:1000], y_test[:1000])


def loader(arrays, batch_size=100, shuffle=False):
    return DataLoader(NDArrayDataset(*arrays), batch_size=batch_size, shuffle=shuffle)


def mlp(seed=0, hidden=32):
    np.random.seed(seed)
    return nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def make_trainer(model, lr=0.5, **options):
    options.setdefault("progress", False)
    options.setdefault("monitor", False)
    return Trainer(model, optim.SGD(model.parameters(), lr=lr, momentum=0.5), **options)


def test_fit_learns_mnist_subset_and_records_history(mnist_subset, graph_baseline):
    train, test = mnist_subset
    model = mlp()
    monitor = MemoryMonitor()
    baseline = graph_baseline().live_nodes
    trainer = make_trainer(model, monitor=monitor)
    history = trainer.fit(loader(train, shuffle=True), epochs=3, val_loader=loader(test, batch_size=250))

    assert history is trainer.history
    assert [entry["epoch"] for entry in history.epochs] == [1, 2, 3]
    assert [entry["step"] for entry in history.steps] == list(range(1, 61))
    assert [entry["epoch"] for entry in history.steps] == [1] * 20 + [2] * 20 + [3] * 20
    assert trainer.epoch == 3 and trainer.global_step == 60
    first, last = history.epochs[0], history.epochs[-1]
    assert last["train_loss"] < 0.6 * first["train_loss"]
    assert last["val_accuracy"] > 0.8  # chance is 0.1
    assert last["steps"] == 20 and last["seconds"] > 0
    assert trainer.evaluate(loader(test))["accuracy"] == pytest.approx(last["val_accuracy"])
    # every metric is a plain Python number: no Tensor (and so no graph) is kept
    for entry in history.steps:
        assert {type(entry[key]) for key in ("loss", "accuracy")} == {float}
        assert type(entry["live_nodes"]) is int and type(entry["memory_bytes"]) is int
        assert entry["batch_size"] == 100
    # the step's graph is gone by the time it is recorded, and the monitor saw every step
    assert history.column("live_nodes") == [baseline] * 60
    assert len(monitor.history) == 60
    assert history.column("memory_bytes") == [sum(r.bytes_by_device.values()) for r in monitor.history]
    # the epoch's train metrics are the batch-size weighted means of its steps
    assert first["train_loss"] == pytest.approx(np.mean(history.column("loss")[:20]))


def test_default_monitor_and_loss(mnist_subset):
    train, _ = mnist_subset
    gc.collect()  # graphs that earlier tests left in reference cycles would count as live nodes
    model = mlp()
    trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.1), progress=False)
    assert isinstance(trainer.monitor, MemoryMonitor)
    assert isinstance(trainer.loss_fn, nn.SoftmaxLoss)
    trainer.fit(loader((train[0][:300], train[1][:300])), epochs=1)
    assert len(trainer.monitor.history) == 3
    assert trainer.monitor.latest.live_nodes == 0
    assert make_trainer(mlp()).monitor is None


def test_second_fit_continues_epoch_and_step_counts(mnist_subset):
    train, _ = mnist_subset
    small = loader((train[0][:500], train[1][:500]))
    trainer = make_trainer(mlp())
    trainer.fit(small, epochs=1)
    trainer.fit(small, epochs=2)
    assert [entry["epoch"] for entry in trainer.history.epochs] == [1, 2, 3]
    assert trainer.history.column("step") == list(range(1, 16))


def test_evaluate_restores_training_mode_and_builds_no_graph(mnist_subset, graph_baseline):
    _, test = mnist_subset
    model = mlp()
    trainer = make_trainer(model)
    test_loader = loader(test, batch_size=300)
    before = graph_baseline()
    metrics = trainer.evaluate(test_loader)
    after = graph_baseline()
    assert after.nodes_created == before.nodes_created
    assert after.live_nodes == before.live_nodes
    assert all(module.training for module in model.modules())
    assert set(metrics) == {"loss", "accuracy"} and 0 <= metrics["accuracy"] <= 1

    model.eval()
    trainer.evaluate(test_loader)
    assert not any(module.training for module in model.modules())


def test_evaluate_restores_training_mode_on_error(mnist_subset):
    _, test = mnist_subset
    model = mlp()

    def broken_loss(logits, y):
        assert not model.training and not ndl.is_grad_enabled()
        raise RuntimeError("broken loss")

    trainer = make_trainer(model, loss_fn=broken_loss)
    with pytest.raises(RuntimeError, match="broken loss"):
        trainer.evaluate(loader(test))
    assert model.training and ndl.is_grad_enabled()


def test_evaluate_weights_batches_by_size(mnist_subset):
    _, test = mnist_subset
    trainer = make_trainer(mlp())
    subset = (test[0][:250], test[1][:250])
    one_batch = trainer.evaluate(loader(subset, batch_size=250))
    uneven = trainer.evaluate(loader(subset, batch_size=100))  # batches of 100, 100, 50
    assert uneven["loss"] == pytest.approx(one_batch["loss"], rel=1e-5)
    assert uneven["accuracy"] == pytest.approx(one_batch["accuracy"])
    with pytest.raises(ValueError, match="no batches"):
        trainer.evaluate([])


class ParameterLog(Callback):
    """Keeps a copy of the parameters after every step."""

    def __init__(self):
        self.after_step = {}

    def on_train_batch_end(self, trainer, metrics):
        self.after_step[metrics["step"]] = [p.numpy().copy() for p in trainer.model.parameters()]


def nan_at_call(call_number):
    """SoftmaxLoss whose result turns NaN on its ``call_number``-th call."""
    softmax_loss, calls = nn.SoftmaxLoss(), [0]

    def loss_fn(logits, y):
        calls[0] += 1
        loss = softmax_loss(logits, y)
        return loss * float("nan") if calls[0] == call_number else loss

    return loss_fn


@pytest.mark.parametrize("bad_step, epoch", [(5, 1), (25, 2)])
def test_nan_loss_stops_naming_epoch_and_step_before_the_update(mnist_subset, bad_step, epoch):
    train, _ = mnist_subset
    model = mlp()
    log = ParameterLog()
    trainer = make_trainer(model, loss_fn=nan_at_call(bad_step), callbacks=[log])
    with pytest.raises(FloatingPointError, match=f"epoch {epoch}, step {bad_step} ") as caught:
        trainer.fit(loader(train), epochs=3)
    error = caught.value
    assert isinstance(error, NonFiniteLossError)
    assert (error.epoch, error.step) == (epoch, bad_step) and np.isnan(error.loss)
    assert "lr=0.5" in str(error)
    assert trainer.global_step == bad_step - 1
    for saved, param in zip(log.after_step[bad_step - 1], model.parameters()):
        np.testing.assert_array_equal(param.numpy(), saved)  # the NaN step changed nothing


def test_diverging_learning_rate_raises_floating_point_error(mnist_subset):
    train, _ = mnist_subset
    trainer = make_trainer(mlp(), lr=1e30)
    with pytest.raises(FloatingPointError, match=r"epoch 1, step \d+ "):
        with np.errstate(all="ignore"):
            trainer.fit(loader(train), epochs=1)


def test_trainer_argument_errors():
    model = mlp()
    sgd = optim.SGD(model.parameters())
    with pytest.raises(ValueError, match="tpu"):
        Trainer(model, sgd, device="tpu", monitor=False, progress=False)
    with pytest.raises(TypeError, match="monitor"):
        Trainer(model, sgd, monitor="yes", progress=False)
    with pytest.raises(TypeError, match="subclass trainers.Callback"):
        Trainer(model, sgd, monitor=False, progress=False, callbacks=[object()])
    assert Trainer(model, sgd, device="cpu", monitor=False, progress=False).device is ndl.cpu()


def test_progress_bar_shows_metrics_on_stderr(mnist_subset, capsys):
    train, test = mnist_subset
    small = (train[0][:500], train[1][:500])
    trainer = make_trainer(mlp(), progress=ProgressBar(every=2))
    trainer.fit(loader(small), epochs=2, val_loader=loader(test))
    captured = capsys.readouterr()
    assert captured.out == ""
    for text in ("epoch 1", "epoch 2", "5/5", "loss=", "acc=", "nodes=", "mem=", "val_acc="):
        assert text in captured.err
    assert trainer.callbacks[0].bar is None  # closed at the epoch's end

    make_trainer(mlp(), progress=False).fit(loader(small), epochs=1)
    assert capsys.readouterr().err == ""


def test_progress_bar_closes_when_fit_fails(mnist_subset, capsys):
    train, _ = mnist_subset
    bar = ProgressBar()
    trainer = make_trainer(mlp(), loss_fn=nan_at_call(3), progress=bar)
    with pytest.raises(FloatingPointError):
        trainer.fit(loader(train), epochs=1)
    assert bar.bar is None
    assert "epoch 1" in capsys.readouterr().err


def test_fit_keeps_no_graph_between_steps(mnist_subset):
    train, _ = mnist_subset
    trainer = make_trainer(mlp())
    gc.collect()
    baseline = ndl.autograd.snapshot().live_nodes
    trainer.fit(loader(train), epochs=1)
    gc.collect()
    assert ndl.autograd.snapshot().live_nodes == baseline


def test_train_mnist_example_runs_and_reports(capsys, tmp_path):
    example = load_example("train_mnist")
    checkpoint = tmp_path / "mnist.npz"
    arguments = ["--train-samples", "1000", "--epochs", "1", "--no-progress", "--checkpoint", str(checkpoint)]
    test = example.main(arguments)
    report = capsys.readouterr().out
    assert test["accuracy"] > 0.6
    for line in ("test accuracy", "seconds per epoch", "peak live graph nodes", "peak tensor memory", "MemoryMonitor"):
        assert line in report
    assert checkpoint.exists()
    example.main(arguments[:3] + ["2"] + arguments[4:])  # resumes at epoch 1 and trains one more
    assert "resumed from" in capsys.readouterr().out
