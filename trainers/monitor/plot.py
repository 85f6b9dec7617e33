"""Figures of a run (need the optional matplotlib): the monitor's memory panel, and the training figure.

``plot_step_history`` (``plot_history``, its earlier name): live graph nodes and memory against
iteration (``MemoryMonitor.plot``).
``plot_training``: loss and accuracy (train and validation) beside graph nodes and memory
(``Trainer.plot``). Both return the ``matplotlib.figure.Figure`` (a notebook cell ending in it
shows it inline) and, given a path, also write it there as a PNG, atomically.

The figures are made without ``pyplot``: the user's backend is left as it is, no figure piles up
in pyplot's registry, and a notebook shows the returned figure once (not again at the cell's end).
"""
from __future__ import annotations

import io
import os
from typing import Any, Sequence

from ..io import atomic_write

_MB = 1e6


def _new_figure(caller: str, fallback: str, **options: Any) -> Any:
    """A pyplot-free ``matplotlib.figure.Figure``, or an ImportError that names the install."""
    try:
        import matplotlib  # noqa: F401  (first: a missing matplotlib fails here, whatever is cached)
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            f"{caller} needs matplotlib: pip install 'needle-dl[plot]' (or pip install matplotlib); {fallback}"
        ) from error
    figure = Figure(**options)
    # A notebook shows an object through its _repr_png_; pyplot's inline backend registers one for
    # Figure only once pyplot is imported, so the figure carries its own.
    figure._repr_png_ = lambda: _png_bytes(figure)
    return figure


def _png_bytes(figure: Any) -> bytes:
    stream = io.BytesIO()
    figure.savefig(stream, format="png")
    return stream.getvalue()


def _finish(figure: Any, path: str | os.PathLike[str] | None) -> Any:
    """Lay out ``figure``, write it to ``path`` if one is given, and return it."""
    figure.tight_layout()
    if path is not None:
        with atomic_write(path, "wb") as stream:
            figure.savefig(stream, format="png")
    return figure


def plot_step_history(records: Sequence[Any], path: str | os.PathLike[str] | None = None) -> Any:
    """Draw the monitor's step records (live graph nodes, memory) against iteration.

    Returns the Figure; with ``path`` it is also written there as a PNG.
    """
    figure = _new_figure(
        "MemoryMonitor.plot",
        "the step records are also available as monitor.history, monitor.to_csv(path) and monitor.to_jsonl(path)",
        figsize=(8, 6),
    )
    if not records:
        raise ValueError("MemoryMonitor.plot: no steps monitored yet; call monitor.step() in your loop first")
    nodes_axis, memory_axis = figure.subplots(2, 1, sharex=True)
    iterations = [r.iteration for r in records]
    _draw_nodes(nodes_axis, iterations, [r.live_nodes for r in records], [r.live_spent_nodes for r in records])
    _draw_memory(memory_axis, iterations, [r.live_bytes for r in records], records)
    memory_axis.set_xlabel("iteration")
    return _finish(figure, path)


def plot_training(
    metrics_history: Any, step_records: Sequence[Any], path: str | os.PathLike[str] | None = None
) -> Any:
    """Loss and accuracy (train per step and per epoch, validation per epoch) on top, live graph
    nodes and memory per step below.

    Args:
        metrics_history: the trainer's ``MetricsHistory`` (``trainer.history``).
        step_records: the monitor's ``StepRecord``s of its last consecutive steps, one per training
            step (``trainer.monitor.history.recent``; may be empty); they add spent nodes and host
            RSS, aligned with the last steps of ``metrics_history``.
        path: a PNG to write as well, or None.

    Returns:
        the ``matplotlib.figure.Figure``.
    """
    steps = metrics_history.steps
    if not steps:
        raise ValueError("Trainer.plot: the history has no steps yet; call fit() first")
    figure = _new_figure(
        "Trainer.plot",
        "the metrics are also available as trainer.history.to_csv(path) and trainer.history.to_json(path)",
        figsize=(12, 8),
    )
    step_numbers = [entry["step"] for entry in steps]
    epoch_ends = _epoch_end_steps(metrics_history)
    axes = figure.subplots(2, 2)
    (loss_axis, accuracy_axis), (nodes_axis, memory_axis) = axes
    _draw_metric(loss_axis, "loss", step_numbers, [e["loss"] for e in steps], metrics_history, epoch_ends, "loss")
    _draw_metric(
        accuracy_axis, "accuracy", step_numbers, [e["accuracy"] for e in steps], metrics_history, epoch_ends,
        "accuracy", scale=100.0,
    )
    _show_as_percent(accuracy_axis)
    monitored = list(step_records)[-len(steps):] if step_records else []
    aligned = step_numbers[len(steps) - len(monitored):]
    spent = [r.live_spent_nodes for r in monitored]
    _draw_nodes(nodes_axis, step_numbers, [e["live_nodes"] for e in steps], spent, aligned)
    _draw_memory(memory_axis, step_numbers, [e["memory_bytes"] for e in steps], monitored, aligned)
    for axis in axes[1]:
        axis.set_xlabel("training step")
    figure.suptitle(f"{len(metrics_history.epochs)} epochs, {len(steps)} steps")
    return _finish(figure, path)


def _epoch_end_steps(metrics_history: Any) -> list:
    """The global step at which each epoch in the history ended (the last step of that epoch)."""
    last_step = {}
    for entry in metrics_history.steps:
        last_step[entry["epoch"]] = entry["step"]
    return [last_step.get(entry["epoch"]) for entry in metrics_history.epochs]


def _draw_metric(axis, name, step_numbers, per_step, metrics_history, epoch_ends, title, scale=1.0):
    """Per-step training values (thin), per-epoch training and validation means (markers), each
    multiplied by ``scale``."""
    per_step = [value * scale for value in per_step]
    axis.plot(step_numbers, per_step, color="tab:blue", alpha=0.35, linewidth=0.8, label=f"train {name} (step)")
    points = [(x, e) for x, e in zip(epoch_ends, metrics_history.epochs) if x is not None]
    train = [(x, e[f"train_{name}"] * scale) for x, e in points]
    validation = [(x, e[f"val_{name}"] * scale) for x, e in points if e.get(f"val_{name}") is not None]
    if train:
        axis.plot(*zip(*train), "o-", color="tab:blue", label=f"train {name} (epoch mean)")
    if validation:
        axis.plot(*zip(*validation), "s-", color="tab:orange", label=f"validation {name} (end of epoch)")
    axis.set_title(title)
    axis.set_ylabel(name)
    axis.grid(True, alpha=0.3)
    axis.legend()


def _show_as_percent(axis):
    """Accuracy in percent, from just below its lowest value to 100% (97% is then readable)."""
    from matplotlib.ticker import PercentFormatter

    lowest = min(min(line.get_ydata()) for line in axis.get_lines())
    axis.set_ylim(bottom=max(0.0, lowest - max(2.0, (100.0 - lowest) * 0.05)), top=100.5)
    axis.yaxis.set_major_formatter(PercentFormatter(100.0))
    axis.set_ylabel("accuracy (%)")


def _draw_nodes(axis, x, live_nodes, spent_nodes, spent_x=None):
    axis.plot(x, live_nodes, label="live graph nodes")
    if spent_nodes:
        axis.plot(x if spent_x is None else spent_x, spent_nodes, "--", label="spent (after backward)")
    axis.set_title("graph nodes alive between steps (flat = no leak)")
    axis.set_ylabel("graph nodes")
    top = max(1, *live_nodes, *spent_nodes) * 1.1
    axis.set_ylim(bottom=-0.08 * top, top=top)  # a margin below 0: a healthy flat 0 line stays visible
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


plot_history = plot_step_history  # the earlier name
