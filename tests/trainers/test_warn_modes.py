"""The summary counts what was issued in every warn mode, and the command-line switch works."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import patterns
from recording import run_recorded
from trainers import GraphLeakWarning, MemoryMonitor, NoGradWarning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def both_problems(monitor, iterations):
    """A training loop that leaks through a list, then a validation without no_grad."""
    patterns.curve_every(monitor, iterations, every=1)
    patterns.eval_argmax(monitor, 10)


def counts(summary):
    lines = dict(line.strip().split(": ", 1) for line in summary.splitlines()[1:])
    return int(lines["leak warnings"]), int(lines["no_grad warnings"])


@pytest.mark.parametrize("mode", ["once", "always", "ignore"])
def test_summary_counts_equal_the_warnings_issued(mode):
    monitor, arrivals = run_recorded(both_problems, 80, warn=mode)
    leaks = sum(w.category is GraphLeakWarning for _, w in arrivals)
    no_grad = sum(w.category is NoGradWarning for _, w in arrivals)
    assert counts(monitor.summary()) == (leaks, no_grad)
    expected = {"once": lambda: leaks == 1 and no_grad == 1, "always": lambda: leaks >= 2 and no_grad == 1,
                "ignore": lambda: leaks == no_grad == 0}
    assert expected[mode](), (leaks, no_grad)


def test_summary_counts_the_error_raised_in_warn_error():
    monitor = MemoryMonitor(warn="error")
    with pytest.raises(GraphLeakWarning):
        patterns.curve_every(monitor, 80, every=1)
    monitor.close()
    assert counts(monitor.summary()) == (1, 0)


def test_summary_under_a_filter_that_turns_warnings_into_errors():
    monitor = MemoryMonitor()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoGradWarning)
        with pytest.raises(NoGradWarning):
            patterns.eval_argmax(monitor, 10)
    monitor.close()
    assert counts(monitor.summary()) == (0, 1)


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    import patterns
    from trainers import MemoryMonitor
    monitor = MemoryMonitor()
    patterns.curve_every(monitor, 40)
    print("ran to the end;", monitor.summary().splitlines()[-2].strip())
    """
)


def run_script(tmp_path, environment=None, options=()):
    script = tmp_path / "leaky.py"
    script.write_text(SCRIPT.format(root=ROOT, tests=os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k not in ("NEEDLE_WARNINGS", "PYTHONWARNINGS")}
    env.update(environment or {})
    return subprocess.run([sys.executable, *options, str(script)], capture_output=True, text=True, env=env, timeout=120)


def test_needle_warnings_error_turns_a_leak_into_an_error(tmp_path):
    result = run_script(tmp_path, {"NEEDLE_WARNINGS": "error"})
    assert result.returncode == 1
    assert "trainers.diagnosis.warnings.GraphLeakWarning: graph leak:" in result.stderr
    assert f"patterns.py:{patterns.site('curve')}: curve.append(loss)" in result.stderr
    assert "ran to the end" not in result.stdout


def test_without_the_switch_the_run_warns_and_goes_on(tmp_path):
    result = run_script(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "GraphLeakWarning: graph leak:" in result.stderr
    assert "ran to the end; leak warnings: 1" in result.stdout


def test_needle_warnings_ignore_shows_nothing(tmp_path):
    result = run_script(tmp_path, {"NEEDLE_WARNINGS": "ignore"})
    assert result.returncode == 0 and "GraphLeakWarning" not in result.stderr


def test_message_filter_on_the_command_line(tmp_path):
    result = run_script(tmp_path, options=("-W", "error:graph leak"))
    assert result.returncode == 1 and "GraphLeakWarning: graph leak:" in result.stderr


def test_a_misspelt_switch_names_the_variable_and_the_choices(tmp_path):
    result = run_script(tmp_path, {"NEEDLE_WARNINGS": "eror"})
    assert result.returncode == 1
    assert "NEEDLE_WARNINGS='eror' is not a warnings action; use one of error, ignore" in result.stderr


@pytest.mark.parametrize("spelling, action", [("error", "error"), ("  Ignore\n", "ignore"), ("ALWAYS", "always")])
def test_the_switch_installs_one_filter_for_the_diagnostic_warnings(spelling, action):
    from trainers.diagnosis.warnings import DiagnosticWarning, apply_environment

    with warnings.catch_warnings():
        before = list(warnings.filters)
        assert apply_environment({"NEEDLE_WARNINGS": spelling, "OTHER": "x"}) == action
        assert warnings.filters[0][0] == action and warnings.filters[0][2] is DiagnosticWarning
        assert warnings.filters[1:] == before


@pytest.mark.parametrize("environ", [{}, {"NEEDLE_WARNINGS": ""}, {"NEEDLE_WARNINGS": "  "}, {"OTHER": "error"}])
def test_without_the_switch_no_filter_is_added(environ):
    from trainers.diagnosis.warnings import apply_environment

    with warnings.catch_warnings():
        before = list(warnings.filters)
        assert apply_environment(environ) is None
        assert warnings.filters == before


def test_a_misspelt_switch_raises_in_process_and_adds_no_filter():
    from trainers.diagnosis.warnings import apply_environment

    with warnings.catch_warnings():
        before = list(warnings.filters)
        with pytest.raises(ValueError) as raised:
            apply_environment({"NEEDLE_WARNINGS": "Eror"})
        assert warnings.filters == before
    assert str(raised.value) == (
        "NEEDLE_WARNINGS='Eror' is not a warnings action; use one of error, ignore, always, default, once, module "
        "(e.g. NEEDLE_WARNINGS=error to turn every leak warning into an error)"
    )
