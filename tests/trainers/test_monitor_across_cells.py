"""One monitor through a notebook's cells: a re-run loop warns again, a second leak is found as fast as
the first, the lecture's trap warns early, and a terminal shows the warning's source line once."""
import os
import subprocess
import sys
import textwrap
import warnings

import patterns
from recording import run_recorded
from trainers import GraphLeakWarning, MemoryMonitor

CELL = textwrap.dedent(
    """
    model, opt, loss_fn = patterns.classifier()
    curve = []
    for i, (x, y) in enumerate(patterns.data(30)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        curve.append(loss)
        monitor.step()
    """
)
CELL_LINE = CELL.splitlines().index("    curve.append(loss)") + 1


def run_cell(source, path, namespace):
    """Run ``source`` as a notebook runs a cell: compiled anew each time, under the same file name
    (ipykernel names a cell's file by a hash of its source); returns the iterations at which each
    diagnostic warning arrived."""
    path.write_text(source)
    code = compile(source, str(path), "exec")
    monitor = namespace["monitor"]
    arrivals = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = monitor.history.count
        step = monitor.step

        def noting_step():
            seen = len(caught)
            record = step()
            arrivals.extend((record.iteration - start, w) for w in caught[seen:])
            return record

        monitor.step = noting_step
        try:
            exec(code, namespace)
        finally:
            del monitor.step
    return arrivals


def test_a_re_run_cell_warns_again_as_fast(tmp_path):
    namespace = {"monitor": MemoryMonitor(), "patterns": patterns}
    first = run_cell(CELL, tmp_path / "cell.py", namespace)
    again = run_cell(CELL, tmp_path / "cell.py", namespace)
    for arrivals in (first, again):
        assert [w.category for _, w in arrivals] == [GraphLeakWarning]
        (iteration, warning), = arrivals
        assert iteration <= 6 and warning.lineno == CELL_LINE
    assert namespace["monitor"].warnings_issued["GraphLeakWarning"] == 2


def test_each_watch_is_a_new_run(tmp_path):
    monitor = MemoryMonitor()
    model, opt, loss_fn = patterns.classifier()
    curve = []

    def epoch():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for x, y in monitor.watch(patterns.data(20)):
                opt.reset_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                curve.append(loss)
        return [w for w in caught if w.category is GraphLeakWarning]

    assert len(epoch()) == 1
    assert len(epoch()) == 1  # the same leak, in the next watch(): warned again
    assert monitor.warnings_issued["GraphLeakWarning"] == 2


def two_leaks(monitor, iterations, second_from=40):
    """``curve.append(loss)`` from iteration 10; from ``second_from`` also ``total += loss``."""
    model, opt, loss_fn = patterns.classifier()
    curve, total = [], 0.0
    for i, (x, y) in enumerate(patterns.data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= 10:
            curve.append(loss)
        if i >= second_from:
            total += loss  # site: second leak
        monitor.step()


def test_a_second_leak_in_the_same_loop_is_found_as_fast_as_the_first():
    _, arrivals = run_recorded(two_leaks, 60)
    assert [w.category for _, w in arrivals] == [GraphLeakWarning, GraphLeakWarning]
    (first, _), (second, warning) = arrivals
    assert 10 <= first <= 14
    assert 40 <= second <= 44, second  # not delayed by the first report's quiet period
    assert "total += loss" in str(warning.message)


def test_a_second_leak_in_a_later_cell_is_found_as_fast(tmp_path):
    namespace = {"monitor": MemoryMonitor(), "patterns": patterns}
    run_cell(CELL, tmp_path / "first.py", namespace)
    other = CELL.replace("curve.append(loss)", "total = total + loss").replace("curve = []", "total = 0.0")
    arrivals = run_cell(other, tmp_path / "second.py", namespace)
    (iteration, warning), = arrivals
    assert iteration <= 6 and "total = total + loss" in str(warning.message)


def test_the_lectures_trap_warns_within_a_few_iterations(tmp_path):
    trap = textwrap.dedent(
        """
        import needle as ndl
        sum_loss = 0
        for i in range(30):
            x = ndl.Tensor([2.0])
            sum_loss = sum_loss + x * x
            monitor.step()
        """
    )
    arrivals = run_cell(trap, tmp_path / "trap.py", {"monitor": MemoryMonitor()})
    (iteration, warning), = arrivals
    assert warning.category is GraphLeakWarning and iteration <= 8
    assert "Fix: accumulate a detached value: `sum_loss = sum_loss + (x * x).detach()`" in str(warning.message)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_terminal_shows_the_warnings_source_line_once(tmp_path):
    script = tmp_path / "leaky.py"
    script.write_text(textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import needle as ndl
        from trainers import MemoryMonitor
        monitor = MemoryMonitor()
        w = ndl.Tensor([1.0, 2.0])
        kept = []
        for i in range(30):
            loss = (w * w).sum()
            loss.backward()
            kept.append(loss)
            monitor.step()
        """
    ))
    env = {k: v for k, v in os.environ.items() if k not in ("NEEDLE_WARNINGS", "PYTHONWARNINGS")}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "GraphLeakWarning: graph leak" in result.stderr
    assert result.stderr.count("kept.append(loss)") == 1, result.stderr
    assert f"leaky.py:{12}: kept.append(loss)" in result.stderr


def test_the_same_leak_going_on_is_quiet_between_reports():
    _, arrivals = run_recorded(patterns.curve_every, 120, warn="always", every=1)
    iterations = [i for i, w in arrivals if w.category is GraphLeakWarning]
    gaps = [b - a for a, b in zip(iterations, iterations[1:])]
    assert len(iterations) >= 3 and gaps[0] >= 20 and all(later > earlier for earlier, later in zip(gaps, gaps[1:]))
