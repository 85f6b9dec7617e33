"""Callbacks: the documented hook order, registration order, early stopping, errors."""
import inspect

import numpy as np
import pytest

from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset
from trainers.callbacks import HOOKS, Callback
from trainers.trainer import Trainer


def toy_loader(samples=12, batch_size=4):
    """A small separable 3-class problem: ``samples / batch_size`` batches."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, 4)).astype(np.float32)
    y = X[:, :3].argmax(axis=1).astype(np.uint8)
    return DataLoader(NDArrayDataset(X, y), batch_size=batch_size)


def toy_trainer(callbacks, **options):
    np.random.seed(0)
    model = nn.Linear(4, 3)
    options.setdefault("monitor", False)
    return Trainer(model, optim.SGD(model.parameters(), lr=0.1), progress=False, callbacks=callbacks, **options)


class Recorder(Callback):
    """Appends (name, hook, arguments after the trainer) to a shared log."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_fit_start(self, trainer):
        self.log.append((self.name, "on_fit_start"))

    def on_train_epoch_start(self, trainer, epoch):
        self.log.append((self.name, "on_train_epoch_start", epoch))

    def on_train_batch_start(self, trainer, batch, batch_index):
        self.log.append((self.name, "on_train_batch_start", batch_index))

    def on_after_backward(self, trainer):
        self.log.append((self.name, "on_after_backward"))

    def on_before_optimizer_step(self, trainer, optimizer):
        self.log.append((self.name, "on_before_optimizer_step", optimizer is trainer.optimizer))

    def on_train_batch_end(self, trainer, metrics):
        self.log.append((self.name, "on_train_batch_end", metrics["step"]))

    def on_validation_end(self, trainer, epoch, metrics):
        self.log.append((self.name, "on_validation_end", epoch, sorted(metrics)))

    def on_train_epoch_end(self, trainer, epoch, metrics):
        self.log.append((self.name, "on_train_epoch_end", epoch, trainer.epoch, len(trainer.history.epochs)))

    def on_fit_end(self, trainer):
        self.log.append((self.name, "on_fit_end"))

    def on_exception(self, trainer, error):
        self.log.append((self.name, "on_exception", type(error).__name__))


def test_hooks_fire_in_documented_order():
    log = []
    trainer = toy_trainer([Recorder("only", log)])
    trainer.fit(toy_loader(), epochs=2, val_loader=toy_loader())
    calls = [entry[1:] for entry in log]
    batch = lambda index, step: [  # noqa: E731
        ("on_train_batch_start", index),
        ("on_after_backward",),
        ("on_before_optimizer_step", True),
        ("on_train_batch_end", step),
    ]
    epoch = lambda e, steps: [  # noqa: E731
        ("on_train_epoch_start", e),
        *[entry for index, step in enumerate(steps) for entry in batch(index, step)],
        ("on_validation_end", e, ["accuracy", "loss"]),
        ("on_train_epoch_end", e, e, e),  # the epoch is counted and in history by then
    ]
    assert calls == [("on_fit_start",), *epoch(1, [1, 2, 3]), *epoch(2, [4, 5, 6]), ("on_fit_end",)]


def test_no_validation_hook_without_val_loader():
    log = []
    toy_trainer([Recorder("only", log)]).fit(toy_loader(), epochs=1)
    assert "on_validation_end" not in [entry[1] for entry in log]


def test_callbacks_run_in_registration_order_for_every_hook():
    log = []
    toy_trainer([Recorder("first", log), Recorder("second", log)]).fit(toy_loader(), epochs=1)
    names = [entry[0] for entry in log]
    assert names == ["first", "second"] * (len(log) // 2)
    assert [entry[1:] for entry in log[::2]] == [entry[1:] for entry in log[1::2]]


def test_add_callback_appends():
    log = []
    trainer = toy_trainer([Recorder("first", log)])
    trainer.add_callback(Recorder("added", log))
    trainer.fit(toy_loader(), epochs=1)
    assert [entry[0] for entry in log[:2]] == ["first", "added"]


class StopAtStep(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, metrics):
        if metrics["step"] == self.step:
            trainer.should_stop = True


class StopAtEpoch(Callback):
    def on_train_epoch_end(self, trainer, epoch, metrics):
        trainer.should_stop = epoch == 1


def test_should_stop_from_a_batch_ends_fit_after_that_batch():
    log = []
    trainer = toy_trainer([StopAtStep(2), Recorder("log", log)])
    trainer.fit(toy_loader(), epochs=3)
    assert trainer.global_step == 2
    assert [entry["steps"] for entry in trainer.history.epochs] == [2]  # the partial epoch is summarised
    assert log[-2][1] == "on_train_epoch_end" and log[-1][1] == "on_fit_end"


def test_should_stop_from_epoch_end_ends_fit_after_that_epoch():
    trainer = toy_trainer([StopAtEpoch()])
    trainer.fit(toy_loader(), epochs=3)
    assert trainer.epoch == 1 and trainer.global_step == 3
    trainer.fit(toy_loader(), epochs=1)  # a new fit starts afresh
    assert trainer.epoch == 2


def test_on_exception_replaces_on_fit_end_and_error_propagates():
    log = []

    class Boom(Callback):
        def on_train_batch_end(self, trainer, metrics):
            if metrics["step"] == 2:
                raise KeyError("boom")

    trainer = toy_trainer([Boom(), Recorder("log", log)])
    with pytest.raises(KeyError, match="boom"):
        trainer.fit(toy_loader(), epochs=1)
    hooks = [entry[1] for entry in log]
    assert hooks[-1] == "on_exception" and log[-1][2] == "KeyError"
    assert "on_fit_end" not in hooks


def test_batch_hook_can_add_keys_to_the_steps_metrics():
    class AddLearningRate(Callback):
        def on_train_batch_end(self, trainer, metrics):
            metrics["lr"] = trainer.optimizer.lr

    trainer = toy_trainer([AddLearningRate()])
    trainer.fit(toy_loader(), epochs=1)
    assert trainer.history.column("lr") == [0.1, 0.1, 0.1]


def test_a_batch_hook_whose_parameter_has_its_earlier_name_still_gets_the_metrics():
    seen = []

    class EarlierSpelling(Callback):
        def on_train_batch_end(self, trainer, record):  # the parameter's name before "metrics"
            seen.append(record["step"])

    toy_trainer([EarlierSpelling()]).fit(toy_loader(), epochs=1)
    assert seen == [1, 2, 3]


def test_base_callback_hooks_are_documented_no_ops():
    callback, trainer = Callback(), toy_trainer([])
    arguments = {"on_train_epoch_start": (1,), "on_train_batch_end": ({},), "on_validation_end": (1, {}),
                 "on_train_epoch_end": (1, {}), "on_exception": (ValueError(),),
                 "on_train_batch_start": ((None, None), 0), "on_before_optimizer_step": (None,)}
    for hook in HOOKS:
        method = getattr(callback, hook)
        assert inspect.getdoc(method), f"{hook} has no docstring"
        assert method(trainer, *arguments.get(hook, ())) is None
    assert set(HOOKS) == {name for name in vars(Callback) if name.startswith("on_")}


# ---- the hooks around a step: gradients, clipping ---------------------------------------------------
class GradientNorms(Callback):
    """Notes the gradients' joint norm at each hook that sees them."""

    def __init__(self):
        self.after_backward, self.before_step = [], []

    def on_after_backward(self, trainer):
        self.after_backward.append(joint_norm(trainer.model))

    def on_before_optimizer_step(self, trainer, optimizer):
        self.before_step.append(joint_norm(trainer.model))


def joint_norm(model):
    return float(np.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in model.parameters())))


def test_gradient_clip_val_clips_before_the_step_and_after_user_hooks():
    norms, after = GradientNorms(), GradientNorms()
    trainer = toy_trainer([norms], gradient_clip_val=0.05)
    trainer.add_callback(after)  # registered after the clipping callback: sees clipped gradients
    trainer.fit(toy_loader(), epochs=1)
    assert max(norms.before_step) > 0.05  # the user's hook saw the gradients as backward() left them
    assert norms.after_backward == norms.before_step
    assert all(n == pytest.approx(min(raw, 0.05), rel=1e-4) for n, raw in zip(after.before_step, norms.before_step))
    assert trainer.callbacks[-2].last_norm == pytest.approx(norms.before_step[-1], rel=1e-5)


def test_clipping_as_a_callback_changes_the_update():
    from trainers import GradientClipping

    plain, clipped = toy_trainer([]), toy_trainer([GradientClipping(0.01)])
    plain.fit(toy_loader(), epochs=1)
    clipped.fit(toy_loader(), epochs=1)
    start = toy_trainer([]).model.weight.numpy()
    moved = lambda t: float(np.abs(t.model.weight.numpy() - start).sum())  # noqa: E731
    assert 0 < moved(clipped) < moved(plain)
    # SGD with lr 0.1 moves each step by at most lr * max_norm in norm
    assert moved(clipped) <= 3 * 0.1 * 0.01 * np.sqrt(start.size) + 1e-6


@pytest.mark.parametrize("value", [0, -1.0, "1", True])
def test_gradient_clip_val_must_be_positive(value):
    with pytest.raises(ValueError, match="max_norm > 0"):
        toy_trainer([], gradient_clip_val=value)


def test_memory_monitor_is_a_callback_like_any_other():
    from trainers import MemoryMonitor

    monitor = MemoryMonitor()
    trainer = toy_trainer([], monitor=monitor)
    assert monitor in trainer.callbacks and trainer.monitor is monitor
    trainer.fit(toy_loader(), epochs=2)
    assert len(monitor.history) == trainer.global_step == 6
    assert not monitor.diagnosis.locator.active  # on_fit_end closed any search
    # the same monitor, placed among the callbacks by hand, steps the same way
    by_hand = MemoryMonitor()
    toy_trainer([by_hand]).fit(toy_loader(), epochs=1)
    assert len(by_hand.history) == 3


class RunningMean(nn.Module):
    """A layer that tracks its input's mean, mistakenly keeping the graph."""

    def __init__(self):
        super().__init__()
        self.mean = None

    def forward(self, x):
        batch_mean = x.sum((0,)) / x.shape[0]
        self.mean = batch_mean if self.mean is None else 0.9 * self.mean + 0.1 * batch_mean  # site: trainer_leak
        return x


def test_the_monitor_callback_finds_a_leak_inside_a_trainers_model():
    import warnings

    from trainers import GraphLeakWarning, MemoryMonitor

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 3), RunningMean())
    trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.1), monitor=MemoryMonitor(), progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(toy_loader(samples=80), epochs=1)
    leaks = [w for w in caught if w.category is GraphLeakWarning]
    assert len(leaks) == 1
    with open(__file__) as handle:
        line = next(n for n, text in enumerate(handle, 1) if text.rstrip().endswith("# site: trainer_leak"))
    assert (leaks[0].filename, leaks[0].lineno) == (__file__, line)
    assert "Fix: keep the result detached: `self.mean = (batch_mean if self.mean is None else" in str(leaks[0].message)


def test_progress_in_a_terminal_is_tqdms_text_bar_on_the_given_stream():
    import io

    import numpy as np

    import needle as ndl
    from needle.data import DataLoader, NDArrayDataset
    from trainers import ProgressBar, Trainer

    stream = io.StringIO()
    X = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    loader = DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8)
    model = ndl.nn.Linear(2, 2)
    Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=False,
            progress=ProgressBar(every=1, file=stream)).fit(loader, epochs=1)
    final = stream.getvalue().split("\r")[-1]
    assert final.startswith("epoch 1: 100%|") and "nodes=" in final and "mem=" in final
