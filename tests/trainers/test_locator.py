"""The leak locator: what it notes of each new node, the questions it answers, and the holder chains it finds."""
import collections
import dataclasses
import inspect
import sys

import numpy as np
import pytest

import needle as ndl
from trainers.diagnosis.locator import LeakLocator, fed_forward, reads_weight

HERE = __file__


def line_of(function, text):
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture
def locator():
    found = LeakLocator()
    yield found
    found.stop()


def two_iterations(locator, weight, x):
    """Iteration 3 makes ``a`` (reading the weight) and ``b``; iteration 4 reads ``b`` and makes ``d``."""
    locator.start(3)
    a = x * weight
    b = a + 1.0
    locator.advance(4)
    c = b * 2.0
    d = x + 1.0
    return a, b, c, d


def test_each_new_node_is_noted_with_its_iteration_line_and_what_it_read(locator):
    weight = ndl.nn.Parameter(np.ones(2, dtype="float32"))
    x = ndl.Tensor(np.ones(2, dtype="float32"))
    a, b, c, d = two_iterations(locator, weight, x)
    assert locator.active
    third, fourth = locator.origins_of(3), locator.origins_of(4)
    assert [origin.ref() for origin in third] == [a, b] and [origin.ref() for origin in fourth] == [c, d]
    # NOTE: site_in, not site: under a mutation tool a trampoline frame sits between the recorder and needle
    assert [origin.site_in(two_iterations.__code__) for origin in third + fourth] == [
        (HERE, line_of(two_iterations, text)) for text in ("a = x * weight", "b = a + 1.0", "c = b * 2.0", "d = x + 1.0")
    ]
    assert [origin.iteration for origin in third + fourth] == [3, 3, 4, 4]
    assert [origin.reads_weight for origin in third + fourth] == [True, False, False, False]
    assert [origin.reads_earlier_graph for origin in third + fourth] == [False, False, False, False]
    assert [origin.nbytes for origin in third + fourth] == [8, 8, 8, 8]
    caller = sys._getframe().f_code
    assert third[0].site_in(caller) == (HERE, line_of(test_each_new_node_is_noted_with_its_iteration_line_and_what_it_read,
                                                      "a, b, c, d = two_iterations"))
    assert third[0].site_in(line_of.__code__) is None, "not running when the node was made"
    assert locator.origins_of(5) == []


def test_retained_nodes_and_the_values_carried_across_iterations(locator):
    weight = ndl.nn.Parameter(np.ones(2, dtype="float32"))
    x = ndl.Tensor(np.ones(2, dtype="float32"))
    a, b, c, d = two_iterations(locator, weight, x)
    assert locator.any_retained(4) and not locator.any_retained(3)
    alive = locator.alive()
    assert [node for node, _ in alive] == [a, b, c, d]
    assert [node for node, _ in locator.retained(alive, 4)] == [a, b]
    assert [node for node, _ in locator.retained(alive, 5)] == [a, b, c, d]
    crossings = locator.crossings(alive, 5)
    assert [(consumer, carried) for consumer, _, carried, _ in crossings] == [(c, b)]
    assert crossings[0][1].iteration == 4 and crossings[0][3].iteration == 3
    del a, b, c, d, alive, crossings
    assert locator.alive() == [] and not locator.any_retained(5)


def test_a_node_reading_a_graph_made_before_recording_crosses_into_it(locator):
    x = ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True)
    earlier = x * 3.0
    locator.start(7)
    later = earlier + 1.0
    (origin,) = locator.origins_of(7)
    assert origin.reads_earlier_graph
    alive = locator.alive()
    assert locator.crossings(alive, 8) == [(later, origin, earlier, None)]
    assert locator.crossings(alive, 7) == [], "not yet outlived a whole iteration"


def test_nodes_that_a_backward_makes_have_no_iteration(locator):
    x = ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True)
    y = (x * x).sum()
    locator.start(1)
    y.backward(create_graph=True)
    gradient_graph = x.grad
    assert gradient_graph.op is not None, "create_graph: the gradient is a graph node"
    assert locator.origins_of(1) == [] and locator.alive() == [] and not locator.any_retained(2)
    forward = x + 1.0
    assert [origin.ref() for origin in locator.origins_of(1)] == [forward]


def test_stop_forgets_and_records_nothing_more(locator):
    x = ndl.Tensor(np.ones(2, dtype="float32"))
    locator.start(1)
    kept = x + 1.0
    locator.stop()
    assert not locator.active and locator.origins_of(1) == []
    after = x + 2.0
    assert locator.origins_of(1) == [] and locator.alive() == []
    locator.stop()  # twice is harmless
    locator.start(2)
    locator.start(2)  # a restart does not record twice
    again = x + 3.0
    assert [origin.ref() for origin in locator.origins_of(2)] == [again]
    del kept, after


def test_a_weight_is_a_parameter_or_a_leaf_with_a_gradient():
    parameter = ndl.nn.Parameter(np.ones(2, dtype="float32"))
    trained = ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True)
    (trained * trained).sum().backward()
    untrained = ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True)
    constant = ndl.Tensor(np.ones(2, dtype="float32"))
    assert reads_weight(constant + parameter) and reads_weight(constant + trained)
    assert not reads_weight(constant + untrained)
    assert not reads_weight((parameter * 2.0) + constant), "an inner node is no weight"
    assert not fed_forward(constant + untrained)
    assert fed_forward(constant + parameter)
    spent = untrained * 2.0
    spent.sum().backward()
    assert fed_forward(spent)


# ---- holder chains ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Record:
    step: int
    loss: object


class Plain:
    def __init__(self, loss):
        self.loss = loss


def holder(*nodes):
    """What the locator finds above ``nodes`` (the list passed is its own, never the answer)."""
    listed = list(nodes)
    return LeakLocator.containers_holding(listed, [listed])


def graph():
    return ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True) * 2.0


def test_the_nearest_container_and_the_path_from_its_element_to_the_tensor():
    node = graph()
    log = [node]
    assert holder(node) == (log, node, ())
    pairs = [(1, graph())]
    assert holder(pairs[0][1]) == (pairs, pairs[0][1], (("index", 1),))
    named = {"loss": graph()}
    assert holder(named["loss"]) == (named, named["loss"], (("key", "loss"),))
    stats = [{"step": 1, "loss": graph()}]
    assert holder(stats[0]["loss"]) == (stats, stats[0]["loss"], (("key", "loss"),)), "the log, not its element"
    records = [Record(1, graph())]
    assert holder(records[0].loss) == (records, records[0].loss, (("attr", "loss", 1),))
    objects = [Plain(graph())]
    assert holder(objects[0].loss) == (objects, objects[0].loss, (("attr", "loss", None),))
    queue = collections.deque([graph()])
    assert holder(queue[0]) == (queue, queue[0], ())
    nested = {"train": {"loss": graph()}}
    assert holder(nested["train"]["loss"]) == (nested["train"], nested["train"]["loss"], (("key", "loss"),))
    inner = [[0, graph()]]
    assert holder(inner[0][1]) == (inner[0], inner[0][1], ())


def test_the_first_node_with_a_holder_is_the_one_named():
    loose, held = graph(), graph()
    log = [held]
    assert holder(loose, held) == (log, held, ())


def test_a_running_functions_locals_dict_is_no_container():
    # NOTE: before Python 3.13, reading a frame's f_locals (as a debugger, a profile function or the
    # adding-line search does) leaves the frame a dict of its locals; gc lists it among the
    # tensor's referrers (here ahead of the user's dict, made later) but not the frame that holds it.
    node = graph()
    sys._getframe().f_locals
    by_step = {}
    by_step[0] = node
    sys._getframe().f_locals
    assert holder(node) == (by_step, node, (("key", 0),))


def test_no_container_is_found_past_the_walks_depth_or_for_a_named_attribute():
    deep = [((((graph(),),),),)]
    assert holder(deep[0][0][0][0][0]) == (None, None, ())
    shallow = [(((graph(),),),)]
    assert holder(shallow[0][0][0][0]) == (shallow, shallow[0][0][0][0], (("index", 0), ("index", 0), ("index", 0)))
    kept = Plain(graph())
    assert holder(kept.loss) == (None, None, ()), "an attribute of a named object is no container"
    assert holder(graph()) == (None, None, ())


def test_the_innermost_user_line_is_the_site_and_a_view_adds_no_bytes(locator):
    x = ndl.Tensor(np.ones((2, 2), dtype="float32"), requires_grad=True)
    locator.start(1)
    doubled = x * 2.0
    flat = doubled.reshape((4,))  # a view of doubled's buffer
    made = locator.origins_of(1)
    assert [origin.ref() for origin in made] == [doubled, flat]
    here = test_the_innermost_user_line_is_the_site_and_a_view_adds_no_bytes
    assert made[0].site == (HERE, line_of(here, "doubled = x * 2.0")), "the first frame outside needle, not needle's"
    assert made[1].site == (HERE, line_of(here, "flat = doubled.reshape"))
    assert made[0].stack[0][1:] == made[0].site, "the stack starts at the user's line"
    assert [origin.nbytes for origin in made] == [16, 0], "a view shares its buffer: it keeps no bytes of its own"


def test_a_deep_call_stack_is_noted_to_a_bounded_depth(locator):
    def nested(depth):
        return nested(depth - 1) if depth else ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True) * 2.0

    locator.start(1)
    node = nested(30)
    (origin,) = locator.origins_of(1)
    assert origin.ref() is node
    assert len(origin.stack) == 12, "the innermost 12 user frames"
    assert all(entry[0] is nested.__code__ for entry in origin.stack), "the innermost frames: the recursion's"


def test_an_object_whose_attribute_dict_exists_is_walked_as_without_it():
    # NOTE: CPython keeps attributes inline until ``__dict__`` is asked for; then the walk meets
    # the dict first, and must go on to the object that owns it.
    objects = [Plain(graph())]
    assert objects[0].__dict__ is vars(objects[0])
    assert holder(objects[0].loss) == (objects, objects[0].loss, (("attr", "loss", None),))
    records = [Record(1, graph())]
    vars(records[0])
    assert holder(records[0].loss) == (records, records[0].loss, (("attr", "loss", 1),))
    kept = Plain(graph())
    vars(kept)
    assert holder(kept.loss) == (None, None, ()), "an attribute of a named object is no container"
    chained = [Plain(Plain(graph()))]
    vars(chained[0])
    vars(chained[0].loss)
    assert holder(chained[0].loss.loss) == (
        chained, chained[0].loss.loss, (("attr", "loss", None), ("attr", "loss", None))
    )


def nested_dicts(levels):
    """``{"k<levels-1>": ... {"k0": {"loss": graph}}}`` and its innermost dict."""
    innermost = outer = {"loss": graph()}
    for level in range(levels):
        outer = {f"k{level}": outer}
    return outer, innermost


def test_a_log_of_nested_dicts_is_found_within_the_walks_depth():
    outer, innermost = nested_dicts(2)
    log = [outer]
    assert holder(innermost["loss"]) == (log, innermost["loss"], (("key", "k1"), ("key", "k0"), ("key", "loss")))
    outer, innermost = nested_dicts(3)
    log = [outer]
    assert holder(innermost["loss"]) == (innermost, innermost["loss"], (("key", "loss"),)), "the log is past the walk"


def test_a_fresh_or_stopped_locator_has_nothing_to_answer():
    fresh = LeakLocator()
    assert not fresh.active
    assert fresh.origins_of(0) == [] and fresh.alive() == [] and not fresh.any_retained(0)
    fresh.start(1)
    node = ndl.Tensor(np.ones(2, dtype="float32"), requires_grad=True) * 2.0
    assert [origin.ref() for origin in fresh.origins_of(1)] == [node]
    fresh.stop()
    assert not fresh.active and fresh.origins_of(1) == [] and fresh.alive() == []
