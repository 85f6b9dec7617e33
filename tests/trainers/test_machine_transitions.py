"""LeakDiagnosis's transitions on their own: which untrained-forward runs are skipped after
dismissals, when a NoGradWarning counts as just reported, and what a report says of the growth."""
import sys
import warnings

import needle as ndl
import patterns
from trainers import GraphLeakWarning, MemoryMonitor, NoGradWarning
from trainers.diagnosis.evidence import MISSING_NO_GRAD, UNTRAINED_FORWARD, Finding, Suspicion
from trainers.diagnosis.machine import LeakDiagnosis
from test_diagnosis_states import fake_record

SEEN, OTHER = (8, 8), (5, 0)  # (nodes made, nodes kept) of an untrained forward's first iteration


def recording():
    emitted = []
    diagnosis = LeakDiagnosis(emit=lambda *warning: emitted.append(warning))
    diagnosis.observe(fake_record(0), sys._getframe())
    return diagnosis, emitted


def checked(diagnosis, signature, iteration=1):
    """Whether an untrained-forward suspicion with ``signature`` is located (else skipped)."""
    diagnosis.suspected(Suspicion(UNTRAINED_FORWARD, iteration, signature=signature), fake_record(iteration))
    located = diagnosis.state == "locating_forward"
    diagnosis.close()
    return located


def skipped_before_checked(diagnosis, signature):
    """How many suspicions like ``signature`` are skipped before one is located again."""
    count = 0
    while not checked(diagnosis, signature):
        count += 1
        assert count < 100
    return count


def test_each_dismissal_of_a_run_like_this_skips_twice_as_many_up_to_fifteen():
    diagnosis, _ = recording()
    assert checked(diagnosis, SEEN)  # nothing dismissed yet
    skips = []
    for _ in range(6):
        diagnosis.skip_runs_like(Suspicion(UNTRAINED_FORWARD, 1, signature=SEEN))
        skips.append(skipped_before_checked(diagnosis, SEEN))
    assert skips == [1, 3, 7, 15, 15, 15]


def test_a_run_that_starts_otherwise_is_checked_at_once_and_restarts_the_count():
    diagnosis, _ = recording()
    for _ in range(2):
        diagnosis.skip_runs_like(Suspicion(UNTRAINED_FORWARD, 1, signature=SEEN))  # 3 to skip
    assert checked(diagnosis, OTHER)  # not like the dismissed runs
    assert not checked(diagnosis, SEEN)  # and the dismissed kind is still skipped
    diagnosis.skip_runs_like(Suspicion(UNTRAINED_FORWARD, 1, signature=OTHER))  # a new kind: one to skip
    assert checked(diagnosis, SEEN)
    assert skipped_before_checked(diagnosis, OTHER) == 1


def test_a_reported_evaluation_restarts_the_dismissal_count():
    diagnosis, emitted = recording()
    for _ in range(2):
        diagnosis.skip_runs_like(Suspicion(UNTRAINED_FORWARD, 1, signature=SEEN))
    diagnosis.found_no_grad(Finding(MISSING_NO_GRAD, ("eval.py", 3), iteration=1), fake_record(1))
    assert len(emitted) == 1
    diagnosis.skip_runs_like(Suspicion(UNTRAINED_FORWARD, 2, signature=SEEN))
    assert skipped_before_checked(diagnosis, SEEN) == 1  # counted from the first dismissal again


def no_grad_at(diagnosis, site, iteration):
    diagnosis.found_no_grad(Finding(MISSING_NO_GRAD, site, iteration=iteration), fake_record(iteration))


def test_one_site_warned_within_two_iterations_is_warned_once():
    diagnosis, emitted = recording()
    site = ("eval.py", 3)
    for iteration in [5, 7, 10, 13]:  # 7 is 2 after 5: the same evaluation; 10 after 7 is not
        no_grad_at(diagnosis, site, iteration)
    assert [w[3] for w in emitted] == [site, site, site]
    assert [w[1] for w in emitted] == [NoGradWarning] * 3
    assert all(w[2] == Finding(MISSING_NO_GRAD, site).key for w in emitted)
    no_grad_at(diagnosis, ("other.py", 1), 14)  # another site is never just reported
    assert len(emitted) == 4


def test_a_finding_without_a_site_is_warned_unless_in_the_first_iterations():
    for iteration, warned in [(0, False), (1, False), (2, True), (3, True)]:
        diagnosis, emitted = recording()
        no_grad_at(diagnosis, None, iteration)  # the start counts as a siteless report at -1
        assert bool(emitted) is warned, iteration


def lecture_trap(monitor, iterations):
    sum_loss = 0
    for _ in range(iterations):
        x = ndl.Tensor([2.0])
        sum_loss = sum_loss + x * x
        monitor.step()


def warned(loop, iterations, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with MemoryMonitor(warn="always") as monitor:
            loop(monitor, iterations, **options)
    return monitor, [w for w in caught if w.category is GraphLeakWarning]


def test_a_chain_no_backward_uses_reports_its_own_growth_per_iteration():
    monitor, leaks = warned(lecture_trap, 12)
    message = str(leaks[0].message)
    # the chain waited from iteration 1 to 5: (12 - 4) nodes, and their bytes, over 4 iterations
    records = {r.iteration: r for r in monitor.history}
    assert (records[1].live_nodes, records[5].live_nodes) == (4, 12)
    per_iteration = (records[5].live_bytes - records[1].live_bytes) // 4  # 12 B in float32, 24 B in float64
    assert per_iteration in (12, 24)
    assert message.startswith(f"graph leak: each iteration keeps about 2 graph nodes ({per_iteration} B) more alive "
                              "that no backward() has used (iteration 5, 12 graph nodes alive)")


def test_a_growth_report_names_the_iteration_and_the_live_nodes_then():
    monitor, leaks = warned(patterns.curve_every, 20, every=1)
    message = str(leaks[0].message)
    records = {r.iteration: r for r in monitor.history}
    reported = next(i for i in sorted(records) if f"(iteration {i}, " in message)
    assert f"(iteration {reported}, {records[reported].live_nodes} graph nodes alive)" in message
    assert (leaks[0].filename, leaks[0].lineno) == (patterns.__file__, patterns.site("curve"))


def test_a_wasted_forward_is_emitted_with_its_sites_finding_key():
    import wasted_loops

    emitted = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with MemoryMonitor(warn="always") as monitor:
            monitor.diagnosis.emit = lambda *warning: emitted.append(warning)
            wasted_loops.training_accuracy(monitor, 20)
    site = (wasted_loops.__file__, wasted_loops.site("train_accuracy"))
    assert emitted and all(w[1] is NoGradWarning and w[3] == site for w in emitted)
    assert emitted[0][2] == Finding(MISSING_NO_GRAD, site).key
    assert "with needle.no_grad():" in emitted[0][0]


def evaluation_keeping_its_loss(monitor, iterations):
    model, _, loss_fn = patterns.classifier()
    total = 0.0
    for x, y in patterns.data(iterations):
        loss = loss_fn(model(x), y)  # line: kept_loss
        total += float(loss.numpy())
        monitor.step()


def test_kept_losses_dropped_by_the_next_step_are_an_evaluation():
    from test_diagnosis_states import StateTrace

    monitor = StateTrace().run(evaluation_keeping_its_loss, 8)
    entered, _ = monitor.entered("awaiting_backward")
    assert monitor.left("awaiting_backward") == entered + 1  # the loss was replaced: dropped
    assert (entered + 1, NoGradWarning) in monitor.arrivals
    assert monitor.last_finding.kind == "missing_no_grad"
    with open(__file__) as handle:
        line = next(n for n, text in enumerate(handle, 1) if text.rstrip().endswith("# line: kept_loss"))
    assert monitor.last_finding.site == (__file__, line)


def test_a_growth_is_found_when_the_next_iterations_nodes_outlive_one_more_step():
    from test_diagnosis_states import StateTrace

    for loop in [lambda m, n: patterns.curve_every(m, n, every=1), patterns.kept_for_confusion_matrix]:
        monitor = StateTrace().run(loop, 30)
        entered, _ = monitor.entered("locating_growth")
        # noting starts with iteration entered + 1; its nodes are still alive at the end of entered + 2
        assert monitor.left("locating_growth") == entered + 2
        assert (entered + 2, GraphLeakWarning) in monitor.arrivals


def test_a_growth_search_waits_for_its_cadence_between_eight_and_sixteen_iterations():
    from trainers.diagnosis.evidence import GROWTH
    from trainers.diagnosis.machine import LocatingGrowth

    deadlines = [LocatingGrowth(Suspicion(GROWTH, 0, nodes=4, every=every), 100).deadline for every in [1, 8, 12, 16, 17, 40]]
    assert deadlines == [110, 110, 114, 118, 118, 118]


def test_an_adding_line_is_awaited_one_iteration_plus_its_cadence_between_one_and_sixteen():
    from trainers.diagnosis.evidence import CONTAINER, GROWTH
    from trainers.diagnosis.machine import AwaitingAddingLine

    finding = Finding(CONTAINER, None)
    deadlines = [AwaitingAddingLine(Suspicion(GROWTH, 0), finding, 100, cadence).deadline
                 for cadence in [0.2, 1, 1.6, 16, 17, 40]]
    assert deadlines == [102, 102, 103, 117, 117, 117]
