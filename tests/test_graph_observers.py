"""Graph observers: each added one hears its thread's graph until removed; the switch follows the count."""
import threading

import numpy as np
import pytest

import needle as ndl
from needle import graph_observers


class Counting(graph_observers.GraphObserver):
    def __init__(self):
        self.made = 0

    def node_made(self, node):
        self.made += 1


@pytest.fixture
def switches():
    """What the process-wide switch was told, in order, while the test ran."""
    assert not graph_observers.observing(), "an earlier test left an observer behind"
    told = []
    graph_observers._switch_hooks.append(told.append)
    yield told
    graph_observers._switch_hooks.remove(told.append)
    assert not graph_observers.observing()


def one_product():
    w = ndl.Tensor(np.ones(3, dtype="float32"), requires_grad=True)
    return w * w


def test_removing_one_observer_leaves_the_others_hearing(switches):
    first, second, third = Counting(), Counting(), Counting()
    for observer in (first, second, third):
        graph_observers.add_observer(observer)
    graph_observers.remove_observer(first)
    one_product()
    assert (first.made, second.made, third.made) == (0, 1, 1)
    graph_observers.remove_observer(third)
    one_product()
    assert (first.made, second.made, third.made) == (0, 2, 1)
    graph_observers.remove_observer(second)
    one_product()
    assert (first.made, second.made, third.made) == (0, 2, 1)


def test_the_switch_turns_on_with_the_first_observer_and_off_with_the_last(switches):
    first, second = Counting(), Counting()
    assert not graph_observers.observing()
    graph_observers.add_observer(first)
    assert graph_observers.observing() and switches == [True]
    graph_observers.add_observer(second)
    assert switches == [True]
    graph_observers.remove_observer(first)
    assert graph_observers.observing() and switches == [True], "one observer is left"
    graph_observers.remove_observer(first)  # not added any more: ignored, the count stays
    graph_observers.remove_observer(Counting())
    assert graph_observers.observing() and switches == [True]
    graph_observers.remove_observer(second)
    assert not graph_observers.observing()
    assert switches == [True, False]
    assert switches[-1] is False


def test_observers_of_two_threads_count_towards_one_switch(switches):
    mine, theirs = Counting(), Counting()
    added, release = threading.Event(), threading.Event()

    def other_thread():
        graph_observers.add_observer(theirs)
        added.set()
        release.wait(10)
        one_product()
        graph_observers.remove_observer(theirs)

    graph_observers.add_observer(mine)
    thread = threading.Thread(target=other_thread)
    thread.start()
    added.wait(10)
    graph_observers.remove_observer(mine)
    assert graph_observers.observing(), "the other thread still observes"
    assert switches == [True]
    one_product()
    release.set()
    thread.join(10)
    assert not graph_observers.observing() and switches == [True, False]
    assert (mine.made, theirs.made) == (0, 1), "each observer hears only its own thread"


def test_outside_backward_the_thread_is_not_in_backward():
    assert graph_observers.in_backward() is False
