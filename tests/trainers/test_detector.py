"""LeakDetector on its own: suspicions from hand-made step records, every threshold and figure pinned."""
import pytest

from trainers.diagnosis.detector import LeakDetector
from trainers.diagnosis.evidence import GROWTH, UNTRAINED_FORWARD, UNUSED_GROWTH
from trainers.monitor.records import StepRecord


def record(iteration, live_nodes, backward=1, created=10, freed=10, live_bytes=None, spent=0):
    """One step's record: by default a training step that made and freed 10 nodes."""
    live_bytes = live_nodes * 100 if live_bytes is None else live_bytes
    return StepRecord(iteration, 0, live_nodes, spent, created, freed, backward, {"cpu": live_bytes}, 0, 0, 0, 0.0)


def feed(detector, records):
    """The suspicions ``detector`` names for ``records``, as (iteration, suspicion)."""
    found = []
    for r in records:
        suspicion = detector.observe(r)
        if suspicion is not None:
            found.append((r.iteration, suspicion))
    return found


def test_a_healthy_loop_within_its_band_raises_nothing():
    detector = LeakDetector()
    assert feed(detector, [record(i, 52 - i % 3) for i in range(200)]) == []
    assert detector.growth() == (0, 0, 1, False)


def test_growth_every_iteration_is_suspected_at_its_second_new_high():
    detector = LeakDetector()
    records = [record(0, 50), record(1, 54, spent=4), record(2, 58, live_bytes=6000, spent=8)]
    (iteration, suspicion), = feed(detector, records)
    assert iteration == 2 and suspicion.kind == GROWTH and suspicion.iteration == 2
    assert (suspicion.nodes, suspicion.nbytes, suspicion.every) == (4, 6000 - 5400, 1)
    assert suspicion.baseline == 54 and suspicion.used_by_backward is True


def test_growth_not_used_by_backward_says_so():
    detector = LeakDetector()
    (_, suspicion), = feed(detector, [record(0, 50), record(1, 54, spent=3), record(2, 58, spent=3)])
    assert suspicion.used_by_backward is False


@pytest.mark.parametrize("every", [2, 4, 16])
def test_growth_at_a_cadence_up_to_the_window_is_suspected_with_its_period(every):
    detector = LeakDetector()
    records = [record(i, 50 + 5 * ((i + every - 1) // every)) for i in range(3 * every + 1)]
    found = feed(detector, records)
    first_iteration, first = found[0]
    assert first.every == every and first.nodes == 5
    assert first_iteration == every + 1  # highs at 1, every + 1, 2 * every + 1: the second is suspected


def test_growth_slower_than_the_window_is_not_suspected():
    detector = LeakDetector()
    records = [record(i, 50 + 5 * (i // 17)) for i in range(80)]
    assert feed(detector, records) == []


def test_a_high_beyond_the_window_no_longer_counts_as_the_baseline():
    detector = LeakDetector(window=4)
    # a spike at 1, then 40 for longer than the window: 41 at 7 is a new high over the window
    records = [record(0, 40), record(1, 60)] + [record(i, 40) for i in range(2, 7)] + [record(7, 41), record(8, 42)]
    (iteration, suspicion), = feed(detector, records)
    assert iteration == 8 and suspicion.baseline == 41 and suspicion.nodes == 1


def test_an_iteration_without_backward_that_makes_nodes_is_an_untrained_forward_once_per_run():
    detector = LeakDetector()
    feed(detector, [record(i, 50) for i in range(3)])
    found = feed(detector, [record(3 + i, 50, backward=0, created=7, freed=5) for i in range(4)])
    assert [(i, s.kind, s.signature) for i, s in found] == [(3, UNTRAINED_FORWARD, (7, 2))]
    assert detector.unsettled_run == 4
    assert feed(detector, [record(7, 50)]) == [] and detector.unsettled_run == 0


def test_an_iteration_that_makes_no_node_is_settled():
    detector = LeakDetector()
    found = feed(detector, [record(0, 50), record(1, 54, backward=0, created=0, freed=0), record(2, 58, backward=0, created=0)])
    assert [s.kind for _, s in found] == [GROWTH] and detector.unsettled_run == 0


def test_a_long_run_without_backward_that_keeps_growing_is_unused_growth():
    detector = LeakDetector(unused_steps=10)
    feed(detector, [record(0, 50, live_bytes=5000)])
    # each iteration keeps 3 more nodes (300 more bytes) and never calls backward()
    run = [record(1 + i, 53 + 3 * i, backward=0, created=3, freed=0, live_bytes=5300 + 300 * i) for i in range(12)]
    found = feed(detector, run)
    kinds = [(i, s.kind) for i, s in found]
    assert kinds == [(1, UNTRAINED_FORWARD), (10, UNUSED_GROWTH), (11, UNTRAINED_FORWARD)]
    suspicion = found[1][1]
    assert suspicion.baseline == 50  # the live nodes before the run began
    assert suspicion.nodes == pytest.approx((80 - 50) / 10) and suspicion.nbytes == pytest.approx((8000 - 5000) / 10)
    assert detector.unsettled_run == 2  # counted afresh after the suspicion


def test_a_long_run_without_backward_that_does_not_grow_is_not_unused_growth():
    detector = LeakDetector(unused_steps=10)
    feed(detector, [record(0, 50)])
    found = feed(detector, [record(1 + i, 50, backward=0, created=3, freed=3) for i in range(30)])
    assert [s.kind for _, s in found] == [UNTRAINED_FORWARD]


def test_growth_is_averaged_over_every_event_since_it_began():
    detector = LeakDetector()
    # highs at 1, 3, 5, 7 growing 4, 6, 8 nodes (100 bytes a node), spent nodes growing too
    lives = {0: 50, 1: 54, 2: 54, 3: 60, 4: 60, 5: 68, 6: 68, 7: 76}
    feed(detector, [record(i, n, spent=n - 50) for i, n in lives.items()])
    nodes, nbytes, every, used = detector.growth()
    assert (nodes, nbytes, every, used) == ((76 - 54) / 3, (7600 - 5400) / 3, 2, True)


def test_growth_that_stopped_for_longer_than_the_window_starts_afresh():
    detector = LeakDetector(window=4)
    lives = [50, 54, 58] + [58] * 6 + [62, 66]  # highs at 1, 2, then after a quiet spell at 9, 10
    found = feed(detector, [record(i, n) for i, n in enumerate(lives)])
    assert [i for i, _ in found] == [2, 10]
    assert detector.growth() == (4, 400, 1, False)  # from the event at 9 only, not from the one at 1


def test_forget_means_growth_must_recur_twice_again():
    detector = LeakDetector()
    feed(detector, [record(0, 50), record(1, 54), record(2, 58)])
    detector.forget()
    assert detector.growth() == (0, 0, 1, False) and detector.unsettled_run == 0
    assert feed(detector, [record(3, 62)]) == []  # one new high after forget(): not yet
    (iteration, suspicion), = feed(detector, [record(4, 66)])
    assert iteration == 4 and suspicion.nodes == 4


def test_forget_ends_an_untrained_run():
    detector = LeakDetector()
    feed(detector, [record(0, 50), record(1, 50, backward=0), record(2, 50, backward=0)])
    assert detector.unsettled_run == 2
    detector.forget()
    (_, suspicion), = feed(detector, [record(3, 50, backward=0)])
    assert suspicion.kind == UNTRAINED_FORWARD  # the run counts from 1 again


def test_the_unused_run_measures_bytes_from_the_last_settled_step():
    detector = LeakDetector(unused_steps=4)
    feed(detector, [record(0, 50, live_bytes=1000), record(1, 50, live_bytes=2000)])
    run = [record(2 + i, 52 + 2 * i, backward=0, created=2, freed=0, live_bytes=3000 + 500 * i) for i in range(4)]
    suspicion = feed(detector, run)[-1][1]
    assert suspicion.kind == UNUSED_GROWTH
    assert suspicion.nbytes == pytest.approx((4500 - 2000) / 4) and suspicion.nodes == pytest.approx((58 - 50) / 4)


def test_defaults_are_a_window_of_16_and_80_unused_steps():
    detector = LeakDetector()
    assert (detector.window, detector.unused_steps) == (16, 80)


def test_a_fresh_detector_names_an_untrained_forward_at_its_very_first_step():
    detector = LeakDetector()
    assert detector.unsettled_run == 0
    (iteration, suspicion), = feed(detector, [record(0, 51, backward=0, created=1, freed=0)])
    assert (iteration, suspicion.kind, suspicion.iteration, suspicion.signature) == (0, UNTRAINED_FORWARD, 0, (1, 1))
    assert detector.unsettled_run == 1


def test_unused_growth_from_the_very_first_step_counts_bytes_from_zero():
    detector = LeakDetector(unused_steps=4)
    run = [record(i, 52 + 2 * i, backward=0, created=2, freed=0, live_bytes=1000 + 500 * i) for i in range(4)]
    suspicion = feed(detector, run)[-1][1]
    assert (suspicion.kind, suspicion.iteration) == (UNUSED_GROWTH, 3)
    assert suspicion.nbytes == pytest.approx(2500 / 4) and suspicion.baseline == 50


def test_growth_after_a_single_event_is_nothing_yet():
    detector = LeakDetector()
    feed(detector, [record(3, 50), record(4, 57)])  # one new high, live nodes unlike the iteration
    assert detector.growth() == (0, 0, 1, False)


def test_growth_at_exactly_the_window_keeps_averaging_from_its_first_event():
    detector = LeakDetector(window=4)
    lives = [50, 54, 54, 54, 54, 58, 58, 58, 58, 62]  # highs at 1, 5, 9: exactly the window apart
    found = feed(detector, [record(i, n) for i, n in enumerate(lives)])
    assert [i for i, _ in found] == [5, 9]
    assert detector.growth() == (4, 400, 4, False)  # two gaps since the event at 1


def test_the_detector_remembers_only_the_last_two_growth_events():
    detector = LeakDetector()
    feed(detector, [record(i, 50 + i) for i in range(1000)])
    assert len(detector._events) == 2 and len(detector._settled) == 16
