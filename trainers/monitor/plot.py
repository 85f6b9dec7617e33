"""PNGs of a run (need the optional matplotlib): the monitor's memory panel, and the training figure.

``plot_history``: live graph nodes and memory against iteration (``MemoryMonitor.plot``).
``plot_training``: loss and accuracy (train and validation) beside graph nodes and memory, one
PNG (``Trainer.plot``). Both write the file atomically.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from ..io import atomic_write

_MB = 1e6


def _pyplot(caller: str, fallback: str) -> Any:
    """matplotlib.pyplot on the file-only Agg backend, or an ImportError that names the install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            f"{caller} needs matplotlib: pip install 'needle-dl[plot]' (or pip install matplotlib); {fallback}"
        ) from error
    return plt


def _save(figure: Any, path: str | os.PathLike[str]) -> None:
    with atomic_write(path, "wb") as stream:
        figure.savefig(stream, format="png")


def plot_history(records: Sequence[Any], path: str | os.PathLike[str]) -> None:
    """Draw the monitor's records (live graph nodes, memory) against iteration into a PNG at ``path``."""
    plt = _pyplot(
        "MemoryMonitor.plot",
        "the records are also available as monitor.history, monitor.to_csv(path) and monitor.to_jsonl(path)",
    )
    iterations = [r.iteration for r in records]
    figure, (nodes_axis, memory_axis) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    try:
        _draw_nodes(nodes_axis, iterations, [r.live_nodes for r in records], [r.live_spent_nodes for r in records])
        _draw_memory(memory_axis, iterations, [r.live_bytes for r in records], records)
        memory_axis.set_xlabel("iteration")
        figure.tight_layout()
        _save(figure, path)
    finally:
        plt.close(figure)


def plot_training(history: Any, records: Sequence[Any], path: str | os.PathLike[str]) -> None:
    """One PNG: loss and accuracy (train per step and per epoch, validation per epoch) on top,
    live graph nodes and memory per step below.

    Args:
        history: a ``trainers.History``.
        records: the monitor's ``StepRecord`` list (may be empty); they add spent nodes and host
            RSS, aligned with the last steps of the history.
        path: the PNG to write.
    """
    plt = _pyplot(
        "Trainer.plot",
        "the metrics are also available as trainer.history.to_csv(path) and trainer.history.to_json(path)",
    )
    steps = history.steps
    if not steps:
        raise ValueError("Trainer.plot: the history has no steps yet; call fit() first")
    step_numbers = [entry["step"] for entry in steps]
    epoch_ends = _epoch_end_steps(history)
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    try:
        (loss_axis, accuracy_axis), (nodes_axis, memory_axis) = axes
        _draw_metric(loss_axis, "loss", step_numbers, [e["loss"] for e in steps], history, epoch_ends, "loss")
        _draw_metric(
            accuracy_axis, "accuracy", step_numbers, [e["accuracy"] for e in steps], history, epoch_ends, "accuracy"
        )
        monitored = list(records)[-len(steps):] if records else []
        aligned = step_numbers[len(steps) - len(monitored):]
        spent = [r.live_spent_nodes for r in monitored]
        _draw_nodes(nodes_axis, step_numbers, [e["live_nodes"] for e in steps], spent, aligned)
        _draw_memory(memory_axis, step_numbers, [e["memory_bytes"] for e in steps], monitored, aligned)
        for axis in axes[1]:
            axis.set_xlabel("training step")
        figure.suptitle(f"{len(history.epochs)} epochs, {len(steps)} steps")
        figure.tight_layout()
        _save(figure, path)
    finally:
        plt.close(figure)


def _epoch_end_steps(history: Any) -> list:
    """The global step at which each recorded epoch ended (the last step of that epoch)."""
    last_step = {}
    for entry in history.steps:
        last_step[entry["epoch"]] = entry["step"]
    return [last_step.get(entry["epoch"]) for entry in history.epochs]


def _draw_metric(axis, name, step_numbers, per_step, history, epoch_ends, title):
    """Per-step training values (thin), per-epoch training and validation means (markers)."""
    axis.plot(step_numbers, per_step, color="tab:blue", alpha=0.35, linewidth=0.8, label=f"train {name} (step)")
    points = [(x, e) for x, e in zip(epoch_ends, history.epochs) if x is not None]
    train = [(x, e[f"train_{name}"]) for x, e in points]
    validation = [(x, e[f"val_{name}"]) for x, e in points if e.get(f"val_{name}") is not None]
    if train:
        axis.plot(*zip(*train), "o-", color="tab:blue", label=f"train {name} (epoch mean)")
    if validation:
        axis.plot(*zip(*validation), "s-", color="tab:orange", label=f"validation {name} (end of epoch)")
    axis.set_title(title)
    axis.set_ylabel(name)
    axis.grid(True, alpha=0.3)
    axis.legend()


def _draw_nodes(axis, x, live_nodes, spent_nodes, spent_x=None):
    axis.plot(x, live_nodes, label="live graph nodes")
    if spent_nodes:
        axis.plot(x if spent_x is None else spent_x, spent_nodes, "--", label="spent (after backward)")
    axis.set_title("graph nodes alive between steps (flat = no leak)")
    axis.set_ylabel("graph nodes")
    axis.set_ylim(bottom=0, top=max(1, *live_nodes, *spent_nodes) * 1.1)
    axis.grid(True, alpha=0.3)
    axis.legend()


def _draw_memory(axis, x, live_bytes, records, records_x=None):
    """Live tensor bytes on the left axis; the process's RSS (and GPU pool) on the right, whose
    scale is often a hundred times larger."""
    records_x = x if records_x is None else records_x
    lines = axis.plot(x, [b / _MB for b in live_bytes], color="tab:blue", label="live arrays (MB, left)")
    axis.set_ylabel("live arrays (MB)")
    axis.set_ylim(bottom=0, top=max(live_bytes) / _MB * 1.6 or 1)  # sits below the RSS line (x1.2)
    if records:
        process_axis = axis.twinx()
        lines += process_axis.plot(records_x, [r.host_rss / _MB for r in records], color="tab:orange",
                                   label="host RSS (MB, right)")
        if any(r.device_memory_in_use for r in records):
            lines += process_axis.plot(records_x, [r.device_memory_in_use / _MB for r in records],
                                       color="tab:green", label="GPU pool (MB, right)")
        process_axis.set_ylabel("process (MB)")
        process_peak = max(max(line.get_ydata()) for line in lines[1:])
        process_axis.set_ylim(bottom=0, top=process_peak * 1.2 or 1)
    axis.set_title("memory")
    axis.grid(True, alpha=0.3)
    axis.legend(lines, [line.get_label() for line in lines], loc="lower right")
