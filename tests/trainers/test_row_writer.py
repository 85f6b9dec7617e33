"""The one row writer (trainers.io): whole files replaced atomically, rows streamed as they come,
and a resumed run's files trimmed to its step, so they end equal to an uninterrupted run's."""
import csv
import gc
import json
import os

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Callback, CSVLogger, JSONLinesLogger, MemoryMonitor, Trainer
from trainers import io as io_module
from trainers.io import CSV_ROWS, JSON_LINES, RowStream, row_format_for, write_rows


def rows_then_failure(count):
    for step in range(1, count + 1):
        yield {"step": step, "loss": 1.0 / step}
    raise OSError("disk full")


@pytest.mark.parametrize("row_format", [CSV_ROWS, JSON_LINES])
def test_a_failure_mid_write_leaves_the_previous_file_whole(tmp_path, row_format):
    path = tmp_path / "rows.log"
    write_rows(path, [{"step": 1, "loss": 0.5}], ("step", "loss"), row_format)
    before = path.read_bytes()
    with pytest.raises(OSError, match="disk full"):
        write_rows(path, rows_then_failure(50), ("step", "loss"), row_format)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["rows.log"]  # no temporary left behind


def test_none_and_missing_values_are_empty_cells_and_null(tmp_path):
    columns = ("step", "val_loss", "lr")
    rows = [{"step": 1, "val_loss": None}, {"step": 2, "val_loss": 0.25, "lr": 0.1, "extra": "x"}]
    write_rows(tmp_path / "a.csv", rows, columns, CSV_ROWS)
    write_rows(tmp_path / "a.jsonl", rows, columns, JSON_LINES)
    assert (tmp_path / "a.csv").read_text() == "step,val_loss,lr\n1,,\n2,0.25,0.1\n"  # extra keys left out of CSV
    assert [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()] == [
        {"step": 1, "val_loss": None, "lr": None},
        {"step": 2, "val_loss": 0.25, "lr": 0.1, "extra": "x"},
    ]


def test_each_appended_row_is_in_the_file_before_close(tmp_path):
    stream = RowStream(tmp_path / "steps.csv", ("step", "loss"), CSV_ROWS)
    stream.start()
    for step in range(1, 4):
        stream.append([{"step": step, "loss": step / 10}])
        with open(stream.path, newline="") as reader:  # a second reader, as tail -f or pandas would be
            assert [int(row["step"]) for row in csv.DictReader(reader)] == list(range(1, step + 1))
    stream.close()
    stream.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="not open; call start"):
        stream.append([{"step": 4}])


def test_a_stream_leaves_the_file_alone_until_started(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"iteration": 0}\n')
    MemoryMonitor(log_path=path)
    RowStream(path, ("step",), JSON_LINES)
    assert path.read_text() == '{"iteration": 0}\n'


def test_trimming_keeps_rows_up_to_the_step_and_a_failed_trim_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "steps.csv"
    stream = RowStream(path, ("step", "loss"), CSV_ROWS)
    stream.start()
    stream.append([{"step": step, "loss": step / 10} for step in range(1, 6)])
    stream.close()
    before = path.read_text()

    def replace_fails(*args):
        raise OSError("disk full")

    monkeypatch.setattr(io_module.os, "replace", replace_fails)
    with pytest.raises(OSError, match="disk full"):
        stream.start(keep=3)
    assert path.read_text() == before and os.listdir(tmp_path) == ["steps.csv"] and not stream.is_open
    monkeypatch.undo()
    stream.start(keep=3)
    stream.append([{"step": 4, "loss": 0.0}])
    stream.close()
    assert path.read_text() == "step,loss\n1,0.1\n2,0.2\n3,0.3\n4,0.0\n"


def test_a_fresh_start_replaces_the_previous_run_s_file_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n')

    def replace_fails(*args):
        raise OSError("disk full")

    stream = RowStream(path, ("step", "loss"), JSON_LINES)
    monkeypatch.setattr(io_module.os, "replace", replace_fails)
    with pytest.raises(OSError, match="disk full"):
        stream.start()
    assert path.read_text() == '{"step": 1, "loss": 0.5}\n' and os.listdir(tmp_path) == ["steps.jsonl"]
    assert not stream.is_open
    monkeypatch.undo()
    stream.start()
    assert path.read_text() == ""  # the new run's file, empty until its first row
    stream.close()


# A writer killed inside its one write() can leave the last line cut short: here "12,0.3\n" cut
# after its first character, which alone would read as a row of step 1.
TORN = {CSV_ROWS: b"1", JSON_LINES: b'{"step": 12, "lo'}


@pytest.mark.parametrize("row_format", [CSV_ROWS, JSON_LINES])
@pytest.mark.parametrize("keep", [3, 11])
def test_a_resumed_stream_drops_a_row_torn_by_a_killed_writer(tmp_path, row_format, keep):
    path = tmp_path / "steps.log"
    stream = RowStream(path, ("step", "loss"), row_format)
    stream.start()
    stream.append([{"step": step, "loss": step / 10} for step in range(1, 12)])
    stream.close()
    with open(path, "ab") as killed:
        killed.write(TORN[row_format])
    stream.start(keep=keep)
    stream.append([{"step": keep + 1, "loss": 0.0}])
    stream.close()
    expected = [{"step": step, "loss": step / 10} for step in range(1, keep + 1)] + [{"step": keep + 1, "loss": 0.0}]
    rows = row_format.parse_rows(path.read_text())
    if row_format is CSV_ROWS:
        rows = [{"step": int(row["step"]), "loss": float(row["loss"])} for row in rows]
    assert rows == expected


def test_a_resumed_stream_rewrites_a_file_whose_header_is_not_its_columns(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text("step,loss\n1,0.5\n2,0.4\n")  # written by a run that had no lr column
    stream = RowStream(path, ("step", "loss", "lr"), CSV_ROWS)
    stream.start(keep=1)
    stream.append([{"step": 2, "loss": 0.3, "lr": 0.1}])
    stream.close()
    assert path.read_text() == "step,loss,lr\n1,0.5,\n2,0.3,0.1\n"
    path.write_text("")  # an empty file: not even a header
    stream.start(keep=1)
    stream.append([{"step": 1, "loss": 0.3, "lr": 0.1}])
    stream.close()
    assert path.read_text() == "step,loss,lr\n1,0.3,0.1\n"


def test_a_resumed_stream_with_nothing_to_drop_appends_to_the_same_file(tmp_path):
    path = tmp_path / "steps.csv"
    stream = RowStream(path, ("step", "loss"), CSV_ROWS)
    stream.start()
    stream.append([{"step": 1, "loss": 0.5}])
    stream.close()
    inode = os.stat(path).st_ino
    stream.start(keep=1)  # every row is still needed: no replace, the rows stay where they are
    stream.append([{"step": 2, "loss": 0.4}])
    stream.close()
    assert os.stat(path).st_ino == inode and path.read_text() == "step,loss\n1,0.5\n2,0.4\n"


def test_a_file_that_is_not_rows_is_refused_on_resume_naming_it_and_left_as_it_was(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1}\nnot json\n')
    stream = RowStream(path, ("step",), JSON_LINES, what="step log")
    refusal = r"cannot resume the step log .*steps\.jsonl: it is not a jsonl file of rows .*move it away"
    with pytest.raises(ValueError, match=refusal):
        stream.start(keep=1)
    assert path.read_text() == '{"step": 1}\nnot json\n' and not stream.is_open


def test_a_log_path_in_a_missing_folder_is_refused_when_the_monitor_is_made(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"the folder .*missing does not exist; create it first"):
        MemoryMonitor(log_path=tmp_path / "missing" / "steps.csv")
    assert os.listdir(tmp_path) == []


def test_a_log_path_without_a_known_suffix_is_refused():
    with pytest.raises(ValueError, match=r"log_path must end in \.csv or \.jsonl .*log_path='steps.txt'"):
        row_format_for("steps.txt", "log_path")


# ---- kill and resume: the files end equal to an uninterrupted run's ------------------------------
class SaveEachEpoch(Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_train_epoch_end(self, trainer, epoch, metrics):
        trainer.save_checkpoint(self.folder / f"epoch{epoch}.npz")


def loader():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3)).astype(np.float32)
    return DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8, shuffle=True)


def trainer_logging_to(folder, logger_class, suffix, *extra):
    folder.mkdir(exist_ok=True)
    np.random.seed(0)
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 8), ndl.nn.ReLU(), ndl.nn.Linear(8, 2))
    monitor = MemoryMonitor(warn="ignore", log_path=folder / f"monitor{suffix}")
    return Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.2), monitor=monitor, progress=False,
                   callbacks=[logger_class(folder), *extra])


def read_rows(path):
    text = path.read_text()
    return CSV_ROWS.parse_rows(text) if path.suffix == ".csv" else JSON_LINES.parse_rows(text)


# Columns that two runs of the same training agree on (times and process memory differ).
SAME_IN_EVERY_RUN = {
    "steps": ("step", "epoch", "loss", "accuracy", "lr", "batch_size"),
    "epochs": ("epoch", "step", "train_loss", "train_accuracy", "lr", "steps"),
    "monitor": ("iteration", "nodes_created", "nodes_freed", "backward_calls"),
}


def comparable(folder, suffix):
    result = {}
    for name, columns in SAME_IN_EVERY_RUN.items():
        rows = read_rows(folder / f"{name}{suffix}")
        result[name] = [tuple(str(row[column]) for column in columns) for row in rows]
    return result


@pytest.mark.parametrize("logger_class, suffix", [(CSVLogger, ".csv"), (JSONLinesLogger, ".jsonl")])
def test_a_resumed_run_trims_its_logs_to_the_checkpoint_and_ends_as_an_uninterrupted_run(
    tmp_path, logger_class, suffix
):
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    trainer_logging_to(straight, logger_class, suffix).fit(loader(), epochs=3)
    gc.collect()

    first = trainer_logging_to(interrupted, logger_class, suffix, SaveEachEpoch(tmp_path))
    first.fit(loader(), epochs=2)  # then "killed": its logs hold epoch 2, which the resumed run redoes
    del first
    gc.collect()
    assert len(read_rows(interrupted / f"steps{suffix}")) == 10
    resumed = trainer_logging_to(interrupted, logger_class, suffix)  # opens the same files
    resumed.load_checkpoint(tmp_path / "epoch1.npz")
    assert len(read_rows(interrupted / f"monitor{suffix}")) == 10  # opening destroyed nothing
    resumed.fit(loader(), epochs=2)

    expected, got = comparable(straight, suffix), comparable(interrupted, suffix)
    assert [row[0] for row in got["steps"]] == [str(step) for step in range(1, 16)]  # no step twice
    assert [row[0] for row in got["monitor"]] == [str(iteration) for iteration in range(15)]
    assert [row[0] for row in got["epochs"]] == ["1", "2", "3"]
    assert got == expected
    assert sorted(os.listdir(interrupted)) == sorted(f"{name}{suffix}" for name in SAME_IN_EVERY_RUN)


class SaveAtStep(Callback):
    def __init__(self, path, step):
        self.path, self.step = path, step

    def on_train_batch_end(self, trainer, metrics):
        if metrics["step"] == self.step:
            trainer.save_checkpoint(self.path)


def test_a_run_resumed_mid_epoch_keeps_the_rows_up_to_its_step(tmp_path):
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    trainer_logging_to(straight, CSVLogger, ".csv").fit(loader(), epochs=3)
    first = trainer_logging_to(interrupted, CSVLogger, ".csv", SaveAtStep(tmp_path / "step7.npz", 7))
    first.fit(loader(), epochs=2)
    del first
    gc.collect()
    resumed = trainer_logging_to(interrupted, CSVLogger, ".csv")
    resumed.load_checkpoint(tmp_path / "step7.npz")  # in epoch 2, two batches in
    resumed.fit(loader(), epochs=2)
    assert comparable(interrupted, ".csv") == comparable(straight, ".csv")
