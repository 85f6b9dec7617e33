"""The two histories are two named types: ``trainer.history`` is a MetricsHistory (what fit
measured, per step and per epoch) and ``trainer.monitor.history`` a StepHistory (the monitor's
StepRecords, bounded); ``History`` is the first one's earlier name."""
import numpy as np

import needle as ndl
import trainers
import trainers.trainer
from needle.data import DataLoader, NDArrayDataset
from trainers import MemoryMonitor, MetricsHistory, StepHistory, StepRecord, Trainer
from trainers.monitor.history import StepHistory as StepHistoryAtItsModule


def fitted(monitor):
    X = np.random.default_rng(0).standard_normal((24, 3)).astype(np.float32)
    model = ndl.nn.Linear(3, 2)
    trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=monitor, progress=False)
    trainer.fit(DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8), epochs=2)
    return trainer


def test_the_earlier_name_history_is_the_metrics_history_at_both_import_paths():
    assert trainers.History is MetricsHistory
    assert trainers.trainer.History is MetricsHistory
    assert trainers.trainer.MetricsHistory is MetricsHistory
    assert StepHistory is StepHistoryAtItsModule and StepHistory is not MetricsHistory


def test_the_trainers_history_holds_metrics_and_the_monitors_holds_step_records():
    trainer = fitted(MemoryMonitor(warn="ignore", recent=4))
    assert type(trainer.history) is MetricsHistory
    assert repr(trainer.history) == "MetricsHistory(2 epochs, 6 steps)"
    assert [metrics["step"] for metrics in trainer.history.steps] == [1, 2, 3, 4, 5, 6]  # the whole run
    step_history = trainer.monitor.history
    assert type(step_history) is StepHistory
    assert len(step_history) == 6 and len(step_history.recent) == 4  # bounded: the last 4 kept whole
    assert all(type(record) is StepRecord for record in step_history.recent)


def test_a_loaded_checkpoint_gives_back_a_metrics_history(tmp_path):
    trainer = fitted(False)
    trainer.save_checkpoint(tmp_path / "run.npz")
    resumed = fitted(False)
    resumed.load_checkpoint(tmp_path / "run.npz")
    assert type(resumed.history) is MetricsHistory
    assert resumed.history.steps == trainer.history.steps and resumed.history.epochs == trainer.history.epochs
