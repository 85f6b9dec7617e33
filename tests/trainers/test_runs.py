"""RunBoundary on its own: which steps start a new run, from the code objects of the stepping frames."""
import sys
import types

from trainers.diagnosis.runs import STACK_DEPTH, RunBoundary, _codes


def stack(*codes):
    """A chain of frame-like objects, innermost first, with these ``f_code``s."""
    frame = None
    for code in reversed(codes):
        frame = types.SimpleNamespace(f_code=code, f_back=frame)
    return frame


def place(name):
    """A distinct stepping place: a loop's code object under one shared caller."""
    return stack(compile("pass", f"<{name}>", "exec"), stack.__code__)


def test_codes_start_at_the_stepping_frame():
    assert _codes(sys._getframe())[0] is test_codes_start_at_the_stepping_frame.__code__


def test_codes_follow_a_short_stack_to_its_end_and_a_long_one_for_stack_depth_frames():
    codes = [compile("pass", f"<{n}>", "exec") for n in range(STACK_DEPTH + 5)]
    assert _codes(stack(*codes[:3])) == codes[:3]
    assert _codes(stack(*codes)) == codes[:STACK_DEPTH]
    assert _codes(None) == []


def test_steps_alternating_between_two_known_loops_stay_in_one_run():
    runs = RunBoundary()
    train, evaluate = place("train"), place("evaluate")
    assert [runs.is_new(frame) for frame in [train, evaluate, train, evaluate, train]] == [True, True, False, False, False]


def test_a_loop_first_seen_starts_a_run_even_after_many_steps():
    runs = RunBoundary()
    train = place("train")
    assert [runs.is_new(train) for _ in range(3)] == [True, False, False]
    assert runs.is_new(place("a re-run cell")) and not runs.is_new(train)


def test_mark_makes_the_next_step_new_once():
    runs = RunBoundary()
    train = place("train")
    runs.is_new(train)
    runs.mark()
    assert [runs.is_new(train) for _ in range(2)] == [True, False]


def test_only_the_sixteen_latest_places_are_remembered():
    runs = RunBoundary()
    places = [place(f"cell {n}") for n in range(17)]
    assert all(runs.is_new(frame) for frame in places)
    assert not runs.is_new(places[1])  # still remembered
    assert runs.is_new(places[0])  # the oldest, forgotten when the 17th came: new again
    small = RunBoundary(remembered=2)
    for frame in places[:3]:
        small.is_new(frame)
    assert small.is_new(places[0]) and not small.is_new(places[2])
