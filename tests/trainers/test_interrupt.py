"""Ctrl-C: fit stops cleanly after the current step; the main job saves a consistent checkpoint."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Callback, Trainer, load_checkpoint
from trainers.resume import DeferredInterrupt

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_mnist.py"


def loader(count=64, batch_size=8):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((count, 4)).astype(np.float32)
    return DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=batch_size)


class Hooks(Callback):
    """Records hook names; sends SIGINT to this process at a chosen step."""

    def __init__(self, interrupt_at=None):
        self.calls, self.interrupt_at = [], interrupt_at

    def on_fit_start(self, trainer):
        self.calls.append("on_fit_start")

    def on_train_batch_end(self, trainer, metrics):
        if metrics["step"] == self.interrupt_at:
            raise KeyboardInterrupt

    def on_exception(self, trainer, error):
        self.calls.append(("on_exception", type(error).__name__))

    def on_fit_end(self, trainer):
        self.calls.append("on_fit_end")


def make_trainer(*callbacks, optimizer=None):
    np.random.seed(0)
    model = ndl.nn.Linear(4, 2)
    optimizer = optimizer(model.parameters()) if optimizer else ndl.optim.Adam(model.parameters(), lr=0.01)
    return Trainer(model, optimizer, progress=False, callbacks=list(callbacks))


def test_keyboard_interrupt_stops_fit_and_calls_on_exception_then_on_fit_end():
    hooks = Hooks(interrupt_at=3)
    trainer = make_trainer(hooks)
    history = trainer.fit(loader(), epochs=5)  # returns: no traceback
    assert trainer.interrupted
    assert hooks.calls == ["on_fit_start", ("on_exception", "KeyboardInterrupt"), "on_fit_end"]
    assert len(history.steps) == trainer.global_step == 3 and trainer.epoch == 0
    trainer.fit(loader(), epochs=1)
    assert not trainer.interrupted and trainer.epoch == 1


def test_sigint_inside_the_optimizer_update_waits_for_the_step_to_finish(python_sigint_handler):
    """A SIGINT between two parameters' updates: both are updated and counted, then fit stops."""
    updated = []

    class InterruptedSGD(ndl.optim.SGD):
        def step(self):
            before = [p.numpy().copy() for p in self.params]
            super().step()
            if len(updated) == 1:  # the second step: a Ctrl-C lands in the middle of it
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here, inside the step
            updated.append([not np.array_equal(b, p.numpy()) for b, p in zip(before, self.params)])

    trainer = make_trainer(optimizer=lambda params: InterruptedSGD(params, lr=0.5))
    trainer.fit(loader(), epochs=3)
    assert trainer.interrupted
    assert updated == [[True, True], [True, True]]  # the interrupted step finished its update
    assert trainer.global_step == len(trainer.history.steps) == 2  # and was counted
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


def test_deferred_interrupt_outside_critical_blocks_raises_at_once(python_sigint_handler):
    guard = DeferredInterrupt()
    with pytest.raises(KeyboardInterrupt), guard:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        pytest.fail("the interrupt did not arrive")
    reached = []
    with pytest.raises(KeyboardInterrupt), guard:
        with guard.critical():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("end of the critical block")
    assert reached == ["end of the critical block"]


@pytest.fixture
def python_sigint_handler():
    """Python's own Ctrl-C handler for the test, whatever the run started with (a background
    job starts with SIGINT ignored); the handler found is put back afterwards."""
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, found)


def hear_ctrl_c():
    """In the child, before Python starts: SIGINT back to its default action. A shell's
    background job (``pytest ... &``) starts with SIGINT ignored, and a Python started with it
    ignored installs no KeyboardInterrupt handler, so the child would never hear the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_example_until(tmp_path, *arguments, wait_for_step=30):
    """Start the main job, SIGINT it once it has trained ``wait_for_step`` steps; return (rc, stdout)."""
    log_dir = tmp_path / "logs"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    command = [sys.executable, str(EXAMPLE), "--no-progress", "--train-samples", "6000", "--epochs", "50",
               "--log-dir", str(log_dir), *arguments]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, preexec_fn=hear_ctrl_c)
    try:
        deadline = time.monotonic() + 60
        steps = log_dir / "steps.csv"
        while time.monotonic() < deadline and process.poll() is None:
            if steps.exists() and len(steps.read_text().splitlines()) > wait_for_step:
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()[0]
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, output


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, on purpose
def test_an_interrupt_lost_in_a_finalizer_is_raised_at_the_next_step(python_sigint_handler):
    """A Ctrl-C that lands in a __del__ (a Value freeing the last batch) is dropped by Python: the guard raises it again."""
    guard = DeferredInterrupt()

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, and its KeyboardInterrupt is printed and dropped

    reached = []
    with pytest.raises(KeyboardInterrupt), guard:
        Finalized()  # freed at once
        reached.append("after the lost interrupt")
        with guard.critical():
            reached.append("inside the next step")
    assert reached == ["after the lost interrupt"]
    with guard:  # a new loop starts with no interrupt pending
        with guard.critical():
            reached.append("a later fit")
    assert reached[-1] == "a later fit"


def test_main_job_interrupted_saves_a_consistent_checkpoint_and_says_how_to_resume(tmp_path):
    checkpoint = tmp_path / "run.npz"
    returncode, output = run_example_until(tmp_path, "--checkpoint", str(checkpoint))
    assert returncode == 130, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.startswith("interrupted ")]
    assert len(lines) == 1, output
    state = load_checkpoint(checkpoint)
    step, epoch = state["global_step"], state["epoch"]
    assert f"at step {step} " in lines[0] and f"({epoch} of 50 epochs complete)" in lines[0]
    assert f"in epoch {epoch + 1}" in lines[0] or f"after epoch {epoch}" in lines[0]
    assert f"saved {checkpoint}" in lines[0] and lines[0].endswith("--resume")
    assert len(state["history"]["steps"]) == step  # counter and history agree

    # Consistent: the saved parameters are exactly those of `step` uninterrupted steps.
    replay = subprocess.run(
        [sys.executable, "-c", REPLAY, str(EXAMPLE), str(step), str(checkpoint)],
        cwd=tmp_path, env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=120,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout.splitlines()[-1] == "same", replay.stdout

    resumed = subprocess.run(
        [sys.executable, str(EXAMPLE), "--no-progress", "--train-samples", "6000", "--epochs", str(epoch + 1),
         "--checkpoint", str(checkpoint), "--resume"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed from {checkpoint} after epoch {epoch} (step {step})" in resumed.stdout


def test_main_job_interrupted_without_checkpoint_says_nothing_was_saved(tmp_path):
    returncode, output = run_example_until(tmp_path, wait_for_step=5)
    assert returncode == 130, output
    assert "nothing saved (pass --checkpoint PATH to be able to resume)" in output
    assert (tmp_path / "logs" / "history.json").exists()  # the logs are still written


# Trains the main job's model for exactly N steps (no interrupt) and compares with the checkpoint.
REPLAY = r"""
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("train_mnist", sys.argv[1])
example = importlib.util.module_from_spec(spec); spec.loader.exec_module(example)
from trainers import Callback, load_checkpoint
steps, saved = int(sys.argv[2]), load_checkpoint(sys.argv[3])

class StopAt(Callback):
    def on_train_batch_end(self, trainer, metrics):
        if metrics["step"] == steps:
            trainer.should_stop = True

original_fit = example.Trainer.fit
def fit(self, loader, epochs=1, val_loader=None):
    self.add_callback(StopAt())
    return original_fit(self, loader, epochs=epochs, val_loader=val_loader)
example.Trainer.fit = fit
captured = {}
example.print_report = lambda trainer, test, seconds: captured.setdefault("trainer", trainer)
example.main(["--no-progress", "--train-samples", "6000", "--epochs", "50"])  # no validation: it draws no random numbers
trainer = captured["trainer"]
model, optimizer = trainer.model.state_dict(), trainer.optimizer.state_dict()
assert trainer.global_step == steps, trainer.global_step


def same(a, b):
    if isinstance(a, dict):
        return sorted(a) == sorted(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "numpy") or isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
        return np.array_equal(a, np.asarray(b))
    return a == b


print("same" if same(model, saved["model"]) and same(optimizer, saved["optimizer"]) else "different")
"""
