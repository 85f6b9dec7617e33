"""Healthy loops that users write stay silent, every one of them, in warn="always"."""
import pytest

import patterns
from recording import run_recorded


@pytest.mark.parametrize("name", list(patterns.HEALTHY))
def test_healthy_loop_is_silent(name):
    loop, iterations = patterns.HEALTHY[name]
    monitor, arrivals = run_recorded(loop, iterations, warn="always")
    assert [str(w.message) for _, w in arrivals] == []
    assert len(monitor.history) == iterations
    assert monitor.last_finding is None
