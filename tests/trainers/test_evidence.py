"""Suspicion and Finding on their own: their fields, the weakly held nodes, and what makes two findings one."""
import gc

import needle as ndl
from trainers.diagnosis import evidence
from trainers.diagnosis.evidence import Finding, Suspicion


def test_the_kinds_have_distinct_names():
    kinds = [evidence.GROWTH, evidence.UNUSED_GROWTH, evidence.UNTRAINED_FORWARD, evidence.ACCUMULATION,
             evidence.CARRIED_STATE, evidence.CONTAINER, evidence.HELD, evidence.MISSING_NO_GRAD]
    assert kinds == ["growth", "unused_growth", "untrained_forward", "accumulation", "carried_state",
                     "container", "held", "missing_no_grad"]


def test_a_suspicion_keeps_every_figure_it_is_given():
    s = Suspicion("growth", 7, nodes=4, nbytes=400, every=2, used_by_backward=True, baseline=50, signature=(3, 1))
    assert (s.kind, s.iteration, s.nodes, s.nbytes, s.every) == ("growth", 7, 4, 400, 2)
    assert (s.used_by_backward, s.baseline, s.signature) == (True, 50, (3, 1))
    assert repr(s) == "Suspicion('growth', iteration=7, nodes=4, every=2)"


def test_a_suspicions_defaults():
    s = Suspicion("untrained_forward", 3)
    assert (s.nodes, s.nbytes, s.every, s.used_by_backward, s.baseline, s.signature) == (0, 0, 1, False, 0, None)
    assert not hasattr(s, "__dict__")  # slots: one per step can be cheap


def test_a_finding_keeps_every_field_it_is_given_and_starts_the_rest_empty():
    f = Finding("carried_state", ("loop.py", 3), created_site=("loop.py", 2), container_name="hist",
                holders=("h", "c"), state_is_tuple=True, scalar=True, iteration=9)
    assert (f.kind, f.site, f.created_site, f.container_name) == ("carried_state", ("loop.py", 3), ("loop.py", 2), "hist")
    assert (f.holders, f.state_is_tuple, f.scalar, f.iteration) == (("h", "c"), True, True, 9)
    assert (f.holder_path, f.frozen_text, f.frozen_dot) == ((), None, None)
    assert (f.nodes_made, f.bytes_made, f.kept_alive, f.retained_nodes) == (0, 0, False, ())


def test_a_findings_defaults():
    f = Finding("held", None)
    assert (f.created_site, f.container_name, f.holders, f.state_is_tuple, f.scalar, f.iteration) == (
        None, None, (), False, False, None)


def test_a_finding_holds_its_nodes_weakly_and_shows_none_once_any_is_gone():
    w = ndl.Tensor([1.0, 2.0], requires_grad=True)
    a, b = w * w, w + w
    f = Finding("held", ("loop.py", 1), retained_nodes=(a, b))
    assert f.retained_nodes == (a, b)
    assert repr(f) == "Finding('held', site=('loop.py', 1), retained_nodes=2)"
    del b
    gc.collect()
    assert f.retained_nodes == ()  # a part of the graph is gone: nothing half-drawn
    f.retained_nodes = (a,)
    assert f.retained_nodes == (a,)


def test_the_key_is_kind_site_and_container():
    site, made = ("loop.py", 4), ("loop.py", 2)
    assert Finding("container", site, created_site=made, container_name="curve").key == ("container", site, "curve")
    assert Finding("container", None, created_site=made, container_name="curve").key == ("container", made, "curve")
    assert Finding("missing_no_grad", site).key == Finding("missing_no_grad", site, iteration=40).key
    assert Finding("missing_no_grad", site).key != Finding("held", site).key
