"""WastedGraphs on its own: the counts it reads, when it watches, what it finds, and what it says."""
import sys

import pytest

import needle as ndl
from needle import graph_observers, nn
from trainers.diagnosis import wasted
from trainers.diagnosis.wasted import WATCH_ITERATIONS, WastedCounts, WastedGraphs, counts_between


@pytest.fixture
def graphs():
    watcher = WastedGraphs()
    yield watcher
    watcher.stop()
    assert not any(o is watcher for o in graph_observers.THREAD.observers)


def here():
    """The caller's (file, line)."""
    frame = sys._getframe(1)
    return frame.f_code.co_filename, frame.f_lineno


# ---- the counts ---------------------------------------------------------------------------------
def test_counts_between_two_snapshots_separate_wasted_small_and_frozen_graphs():
    w = nn.Parameter(ndl.Tensor([1.0, 2.0], dtype="float32"))
    head = nn.Parameter(ndl.Tensor([3.0, 4.0], dtype="float32"))
    opt = ndl.optim.SGD([head], lr=0.1)
    t = ndl.Tensor([1.0, 2.0], dtype="float32", requires_grad=True)
    before = ndl.autograd.snapshot()
    float((w * w).sum().numpy())  # wasted: the multiply reads w (8 bytes of float32 x 2)
    float(ndl.ops.exp(t).sum().numpy())  # small: reads no parameter (2 nodes)
    ((w * head).sum()).backward()  # w gets a gradient, and no optimizer updates it
    counts = counts_between(before, ndl.autograd.snapshot())
    assert (counts.nodes, counts.nbytes, counts.frozen) == (1, 8, 1)
    assert (counts.small_nodes, counts.small_bytes) == (1 + 2, 4 + 8 + 4)  # the sum of w * w, exp and its sum
    assert counts.backward_calls == 1
    assert opt.params == [head]


def test_wasted_counts_default_to_zero_and_pad_a_short_tuple():
    assert WastedCounts() == (0, 0, 0, 0, 0, 0)
    assert WastedCounts(*(3, 40)) == (3, 40, 0, 0, 0, 0)


# ---- when it watches ----------------------------------------------------------------------------
def test_nothing_moved_means_no_watch(graphs):
    for i in range(5):
        assert graphs.observe(i, (0, 0), None) is None
    assert graphs.watching_until is None and not graph_observers.observing()


def test_a_move_starts_a_watch_of_at_least_the_shortest_length(graphs):
    assert graphs.observe(10, WastedCounts(2, 96, backward_calls=1), None) is None
    assert graphs.watching_until == 10 + WATCH_ITERATIONS == 74
    assert (graphs.nodes_wasted, graphs.bytes_wasted, graphs.frozen_gradients) == (2, 96, 0)
    assert any(o is graphs for o in graph_observers.THREAD.observers)


def test_a_watch_that_saw_no_recurrence_ends_without_a_pause_and_the_next_lasts_twice_the_gap(graphs):
    graphs.observe(0, WastedCounts(1, 8, backward_calls=1), None)
    for i in range(1, WATCH_ITERATIONS + 1):
        graphs.observe(i, WastedCounts(backward_calls=1), None)
    assert graphs.watching_until is None and graphs._skip == 0
    graphs.observe(100, WastedCounts(1, 8, backward_calls=1), None)  # 100 steps after the first
    assert graphs.watching_until == 100 + 2 * 100 + 2


def test_watches_in_which_the_counters_moved_for_nothing_pause_longer_and_longer(graphs):
    pauses = []
    iteration = 0
    for _ in range(5):
        while graphs.watching_until is None:  # skip the paused moves
            graphs.observe(iteration, WastedCounts(1, 8, backward_calls=1), None)
            iteration += 1
        while graphs.watching_until is not None:
            graphs.observe(iteration, WastedCounts(1, 8, backward_calls=1), None)  # moved, found nothing
            iteration += 1
        pauses.append(graphs._skip)
    assert pauses == [1, 3, 7, 15, 15]


def test_a_paused_move_is_skipped_then_the_next_starts_a_watch(graphs):
    graphs._skip = 2
    graphs.observe(0, WastedCounts(1, 8, backward_calls=1), None)
    graphs.observe(1, WastedCounts(1, 8, backward_calls=1), None)
    assert graphs.watching_until is None and graphs._skip == 0
    graphs.observe(2, WastedCounts(1, 8, backward_calls=1), None)
    assert graphs.watching_until is not None


def test_an_evaluation_run_is_one_occurrence(graphs):
    graphs._skip = 1
    for i in range(5):  # five evaluation iterations in a row: one occurrence, paused
        graphs.observe(i, WastedCounts(1, 8, backward_calls=0), None)
    assert graphs.watching_until is None and graphs._skip == 0
    graphs.observe(5, WastedCounts(), None)
    graphs.observe(6, WastedCounts(1, 8, backward_calls=0), None)  # a new run
    assert graphs.watching_until is not None


def test_training_iterations_that_waste_are_each_an_occurrence(graphs):
    graphs._skip = 3
    for i in range(3):
        graphs.observe(i, WastedCounts(1, 8, backward_calls=1), None)
    assert graphs._skip == 0 and graphs.watching_until is None
    assert graphs._gap == 1 and graphs._last_move == 2


def test_frozen_gradients_count_only_where_an_optimizer_stepped(graphs):
    graphs.observe(0, WastedCounts(frozen=2, backward_calls=1), None)
    assert graphs.watching_until is None  # no optimizer step since the watcher was made
    w = nn.Parameter(ndl.Tensor([1.0]))
    opt = ndl.optim.SGD([w], lr=0.1)
    w.grad = ndl.Tensor([1.0])
    opt.step()
    graphs.observe(1, WastedCounts(frozen=2, backward_calls=1), None)
    assert graphs.watching_until == 1 + WATCH_ITERATIONS and graphs.frozen_gradients == 2


def test_small_graphs_are_counted_only_in_steps_without_a_wasted_one(graphs):
    graphs.observe(0, WastedCounts(small_nodes=3, small_bytes=30), None)
    graphs.observe(1, WastedCounts(1, 8, small_nodes=5, small_bytes=50), None)
    assert (graphs.small_nodes, graphs.small_bytes) == (3, 30)


def test_small_graphs_are_sampled_in_short_watches_at_most_three_times(graphs):
    starts = []
    for i in range(40):
        was = graphs.watching_until
        graphs.observe(i, WastedCounts(small_nodes=1, small_bytes=4), None)
        if was is None and graphs.watching_until is not None:
            starts.append((i, graphs.watching_until))
    assert starts == [(0, 2), (3, 5), (6, 8)]  # two steps each: made in one, freed in the next
    assert graphs.watching_until is None


def test_a_wasted_graph_during_a_small_sample_starts_a_full_watch(graphs):
    graphs.observe(0, WastedCounts(small_nodes=1, small_bytes=4), None)
    assert graphs._sampling_small
    graphs.observe(1, WastedCounts(2, 16, backward_calls=1), None)
    assert not graphs._sampling_small and graphs.watching_until == 1 + WATCH_ITERATIONS
    assert (graphs.nodes_wasted, graphs.bytes_wasted) == (2, 16)


# ---- what it finds --------------------------------------------------------------------------------
def start_watch(graphs, iteration=0, frame=None):
    graphs.observe(iteration, WastedCounts(1, 8, backward_calls=1), frame)
    assert graphs.watching_until is not None


def test_a_graph_through_a_parameter_freed_unused_is_found_at_its_line(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    start_watch(graphs, frame=sys._getframe())
    float((w * w).sum().numpy()); site = here()  # noqa: E702
    assert graphs.found == {site: 1}  # the multiply reads w; the sum reads no parameter
    assert graphs.observe(1, WastedCounts(1, 8, backward_calls=1), sys._getframe()) == site
    assert graphs.watching_until is None and graphs._skip == 1 and graphs._reports == 1
    message = graphs.message(site)
    assert "freed without any backward()" in message and "1 graph nodes, 8 B" in message


def test_a_found_evaluation_without_backward_is_said_in_the_evaluation_loop_words(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    start_watch(graphs, frame=sys._getframe())
    float((w * w).sum().numpy()); site = here()  # noqa: E702
    assert graphs.observe(1, WastedCounts(1, 8, backward_calls=0), sys._getframe()) == site
    assert "wrap the evaluation loop in `with needle.no_grad():`" in graphs.message(site)


def test_a_branch_of_a_trained_graph_is_not_found(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    start_watch(graphs, frame=sys._getframe())
    hidden = w * w
    hidden.sum().backward()
    unused = hidden * w  # reads w, but computed from a spent node: an unused auxiliary output
    del unused
    assert not graphs.found


def test_a_graph_reading_no_parameter_is_not_found(graphs):
    t = ndl.Tensor([1.0, 2.0], requires_grad=True)
    start_watch(graphs, frame=sys._getframe())
    float((t * t).sum().numpy())
    assert not graphs.found


def test_a_leaf_with_a_gradient_counts_as_a_weight(graphs):
    t = ndl.Tensor([1.0, 2.0], requires_grad=True)
    t.grad = ndl.Tensor([0.0, 0.0])
    start_watch(graphs, frame=sys._getframe())
    float((t * t).sum().numpy()); site = here()  # noqa: E702
    assert graphs.found == {site: 1}


def test_a_frozen_parameters_forward_backpropagated_is_found_at_its_line(graphs):
    frozen, trained = nn.Parameter(ndl.Tensor([1.0, 2.0])), nn.Parameter(ndl.Tensor([3.0, 4.0]))
    opt = ndl.optim.SGD([trained], lr=0.1)
    start_watch(graphs, frame=sys._getframe())
    features = frozen * frozen; site = here()  # noqa: E702
    (features * trained).sum().backward()
    assert graphs.frozen_found == {site: 1} and not graphs._frozen_made
    graphs.frozen_gradients = 1
    assert graphs.observe(1, WastedCounts(frozen=1, backward_calls=1), sys._getframe()) == site
    message = graphs.message(site)
    assert "no optimizer updates" in message and "1 gradients" in message and "no_grad" in message
    assert opt.params == [trained]


def test_frozen_nodes_are_found_only_when_the_backward_goes_through_them(graphs):
    frozen, trained = nn.Parameter(ndl.Tensor([1.0, 2.0])), nn.Parameter(ndl.Tensor([3.0, 4.0]))
    opt = ndl.optim.SGD([trained], lr=0.1)
    start_watch(graphs, frame=sys._getframe())
    features = frozen * frozen
    (trained * trained).sum().backward()  # another graph: the frozen one is not traversed
    assert not graphs.frozen_found and not graphs._frozen_made  # forgotten after each backward
    assert features is not None and opt.params


def test_without_an_optimizer_nothing_reads_a_frozen_parameter(monkeypatch):
    w = nn.Parameter(ndl.Tensor([1.0]))
    with monkeypatch.context() as patch:  # other tests' optimizers may still be alive
        patch.setattr(wasted.updated_parameters, "any_optimizer", lambda: False)
        assert not wasted._reads_frozen_parameter(w * w)
    opt = ndl.optim.SGD([nn.Parameter(ndl.Tensor([1.0]))], lr=0.1)
    assert wasted._reads_frozen_parameter(w * w)
    w.requires_grad = False
    assert not wasted._reads_frozen_parameter(ndl.Tensor([1.0], requires_grad=True) * w)
    t = ndl.Tensor([1.0], requires_grad=True)
    assert not wasted._reads_frozen_parameter(t * t)  # not a Parameter
    assert opt.params


def test_a_watch_that_finds_both_reports_the_frozen_model_first(graphs):
    graphs.found[("a.py", 1)] = 5
    graphs.frozen_found[("b.py", 2)] = 1
    graphs.watching_until = 10
    graph_observers.add_observer(graphs)
    assert graphs.observe(1, WastedCounts(), None) == ("b.py", 2)
    assert graphs._reported_kind == {("b.py", 2): "frozen"}


def test_the_most_frequent_site_is_reported(graphs):
    graphs.found.update({("a.py", 1): 2, ("b.py", 2): 5})
    graphs.watching_until = 10
    graph_observers.add_observer(graphs)
    assert graphs.observe(1, WastedCounts(backward_calls=1), None) == ("b.py", 2)


def test_reports_pause_longer_and_longer(graphs):
    pauses = []
    for _ in range(5):
        graphs.found[("a.py", 1)] = 1
        graphs.watching_until = 10
        graph_observers.add_observer(graphs)
        graphs.observe(1, WastedCounts(), None)
        pauses.append(graphs._skip)
    assert pauses == [1, 3, 7, 15, 15]


def test_a_report_clears_the_fruitless_count(graphs):
    graphs._fruitless = 3
    graphs.found[("a.py", 1)] = 1
    graphs.watching_until = 10
    graph_observers.add_observer(graphs)
    graphs.observe(1, WastedCounts(), None)
    assert graphs._fruitless == 0


def test_stop_forgets_everything_it_watched(graphs):
    start_watch(graphs)
    graphs.found[("a.py", 1)] = 1
    graphs.frozen_found[("a.py", 1)] = 1
    graphs._made[1] = []
    graphs._frozen_made[1] = None
    graphs.stop()
    assert (graphs.watching_until, graphs.found, graphs.frozen_found, graphs._made, graphs._frozen_made) == (
        None, {}, {}, {}, {})
    assert not graphs._sampling_small
    graphs.stop()  # stopping twice is harmless


def test_nodes_made_in_a_backward_are_not_recorded(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    start_watch(graphs, frame=sys._getframe())
    y = (w * w).sum()
    before = set(graphs._made)
    y.backward()  # builds gradient graphs that read w
    assert set(graphs._made) == before


# ---- small graphs ---------------------------------------------------------------------------------
def test_a_small_sample_records_the_line_of_a_graph_reading_no_parameter(graphs):
    t = ndl.Tensor([1.0, 2.0], requires_grad=True)
    graphs.observe(0, WastedCounts(small_nodes=1, small_bytes=8), sys._getframe())
    float(ndl.ops.exp(t).numpy().sum()); site = here()  # noqa: E702
    assert graphs.small_sites == {site: 1}
    graphs.observe(1, WastedCounts(small_nodes=1, small_bytes=8), sys._getframe())
    assert graphs.watching_until is None  # found: the sample ends
    assert f"{site[0]}:{site[1]}" in graphs.small_summary()


def test_a_small_sample_leaves_out_the_nodes_of_graphs_through_parameters(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    graphs.observe(0, WastedCounts(small_nodes=1, small_bytes=8), sys._getframe())
    float(ndl.ops.exp(w * w).numpy().sum())  # exp reads no parameter, but is part of a wasted graph
    assert not graphs.small_sites


def test_a_small_sample_counts_a_metric_on_trained_logits(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    logits = w * w
    logits.sum().backward()
    graphs.observe(0, WastedCounts(small_nodes=1, small_bytes=8), sys._getframe())
    float(ndl.ops.exp(logits).numpy().sum()); site = here()  # noqa: E702
    assert graphs.small_sites == {site: 1}


def test_the_small_summary_line():
    graphs = WastedGraphs()
    assert graphs.small_summary() is None
    graphs.small_nodes, graphs.small_bytes = 29, 2784
    assert graphs.small_summary() == (
        "  small graphs: 29 graph nodes (2.78 KB) were built with grad on and never used, reading no parameter; "
        "harmless (e.g. a metric on logits), `with needle.no_grad():` there would skip them")


# ---- where a forward is said to be ----------------------------------------------------------------
def code_of(name):
    return compile("pass", name, "exec")


def test_the_stepping_loops_line_is_chosen_first():
    helper, loop = code_of("helper.py"), code_of("loop.py")
    stack = [[helper, ("helper.py", 3), False], [loop, ("loop.py", 9), False]]
    assert wasted._forward_site(stack, [loop]) == ("loop.py", 9)
    assert wasted._forward_site(stack, [code_of("other.py"), loop]) == ("loop.py", 9)


def test_else_the_outermost_line_a_framework_called_is_chosen():
    inner, callback, outer = code_of("a.py"), code_of("callback.py"), code_of("script.py")
    stack = [[inner, ("a.py", 1), True], [callback, ("callback.py", 5), True], [outer, ("script.py", 2), False]]
    assert wasted._forward_site(stack, []) == ("callback.py", 5)


def test_else_the_innermost_user_line_and_none_for_an_empty_stack():
    a, b = code_of("a.py"), code_of("b.py")
    assert wasted._forward_site([[a, ("a.py", 1), False], [b, ("b.py", 2), False]], []) == ("a.py", 1)
    assert wasted._forward_site([], []) is None


def test_a_trainer_stepping_the_monitor_gives_no_loop_code():
    import trainers.trainer as trainer_module

    frame = sys._getframe()
    assert wasted._user_code(frame)[0] is frame.f_code
    assert len(wasted._user_code(frame, depth=1)) == 1
    framework = compile("frame = sys._getframe()", trainer_module.__file__, "exec")
    scope = {"sys": sys}
    exec(framework, scope)
    assert wasted._user_code(scope["frame"]) == []
    assert wasted._user_code(None) == []


def test_the_creation_stack_holds_user_frames_and_marks_those_a_framework_called():
    stack = wasted._creation_stack(sys._getframe())
    assert stack[0][0] is sys._getframe().f_code and stack[0][1][0] == __file__
    assert all(not wasted.is_framework_file(code.co_filename) for code, _, _ in stack)
    assert len(stack) <= 16
    # pytest (a user file here) calls this test through pluggy: no frame above is needle's or trainers'
    assert stack[0][2] is False


def test_ancestors_stop_at_spent_nodes_only_when_asked():
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    hidden = w * w
    hidden.sum().backward()
    top = ndl.ops.exp(hidden)
    assert any(x is w for x in wasted._ancestors(top))
    assert not any(x is w for x in wasted._ancestors(top, through_spent=False))
    assert wasted._reaches_spent(top) and not wasted._reaches_parameter(top)
    fresh = ndl.ops.exp(w * w)
    assert wasted._reaches_parameter(fresh) and not wasted._reaches_spent(fresh)


# ---- what mutation testing showed nothing pinned down ------------------------------------------------
def stepped_optimizer():
    w = nn.Parameter(ndl.Tensor([1.0]))
    opt = ndl.optim.SGD([w], lr=0.1)
    w.grad = ndl.Tensor([1.0])
    opt.step()
    return opt


def test_a_single_frozen_gradient_is_a_move(graphs):
    keep = stepped_optimizer()
    graphs.observe(0, WastedCounts(frozen=1, backward_calls=1), None)
    assert graphs.watching_until == WATCH_ITERATIONS and keep.params


def test_a_wasted_graph_during_a_small_sample_watches_as_long_as_twice_the_gap(graphs):
    graphs.observe(0, WastedCounts(1, 8, backward_calls=1), None)
    for i in range(1, WATCH_ITERATIONS + 1):
        graphs.observe(i, WastedCounts(backward_calls=1), None)
    assert graphs.watching_until is None
    graphs.observe(99, WastedCounts(small_nodes=1, small_bytes=4), None)  # a small sample begins
    assert graphs._sampling_small
    graphs.observe(100, WastedCounts(1, 8, backward_calls=1), sys._getframe())  # 100 steps after the first
    assert graphs.watching_until == 100 + 2 * 100 + 2 and not graphs._sampling_small
    assert graphs._loop_code[0] is sys._getframe().f_code


def test_the_frozen_message_names_the_line():
    graphs = WastedGraphs()
    site = here()
    graphs._reported_kind[site] = "frozen"
    graphs.frozen_gradients = 3
    assert f"{site[0]}:{site[1]}" in graphs.message(site) and "3 gradients" in graphs.message(site)


def test_one_small_node_is_summarised():
    graphs = WastedGraphs()
    graphs.small_nodes, graphs.small_bytes = 1, 4
    assert graphs.small_summary().startswith("  small graphs: 1 graph nodes (4 B)")


def test_each_node_on_a_line_is_counted(graphs):
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    start_watch(graphs, frame=sys._getframe())
    float((w * w + w).sum().numpy()); site = here()  # noqa: E702  (two nodes read w)
    assert graphs.found == {site: 2}


def test_each_small_node_on_a_line_is_counted(graphs):
    t = ndl.Tensor([1.0, 2.0], requires_grad=True)
    graphs.observe(0, WastedCounts(small_nodes=1, small_bytes=8), sys._getframe())
    float(ndl.ops.exp(ndl.ops.exp(t)).numpy().sum()); site = here()  # noqa: E702
    assert graphs.small_sites == {site: 2}


def test_frozen_nodes_are_counted_over_every_backward_of_a_watch(graphs):
    frozen, trained = nn.Parameter(ndl.Tensor([1.0, 2.0])), nn.Parameter(ndl.Tensor([3.0, 4.0]))
    opt = ndl.optim.SGD([trained], lr=0.1)
    start_watch(graphs, frame=sys._getframe())
    for _ in range(2):
        features = frozen * frozen + frozen; site = here()  # noqa: E702  (two nodes read frozen)
        (features * trained).sum().backward()
    assert graphs.frozen_found == {site: 4} and opt.params


def test_a_frozen_node_freed_unused_is_forgotten(graphs):
    frozen = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    opt = ndl.optim.SGD([nn.Parameter(ndl.Tensor([1.0]))], lr=0.1)
    start_watch(graphs, frame=sys._getframe())
    float((frozen * frozen).sum().numpy())
    assert graphs._frozen_made == {} and graphs._made == {} and opt.params


def test_the_loop_code_reaches_twelve_user_frames():
    def nested(depth):
        return nested(depth - 1) if depth else wasted._user_code(sys._getframe())

    assert len(nested(20)) == 12


def test_of_several_lines_a_framework_called_the_outermost_is_chosen():
    a, b, c = code_of("a.py"), code_of("b.py"), code_of("c.py")
    stack = [[a, ("a.py", 1), True], [b, ("b.py", 2), True], [c, ("c.py", 3), True]]
    assert wasted._forward_site(stack, []) == ("c.py", 3)


def test_the_ancestor_search_is_bounded():
    w = nn.Parameter(ndl.Tensor([1.0]))
    for length, reached in ((wasted._ANCESTORS_CHECKED, True), (wasted._ANCESTORS_CHECKED + 1, False)):
        top = w
        for _ in range(length):
            top = top * 1.0
        assert wasted._reaches_parameter(top) is reached, length


def test_the_ancestor_search_yields_each_value_once():
    w = nn.Parameter(ndl.Tensor([1.0]))
    top = w
    for _ in range(10):
        top = top + top  # each node reads the one before twice
    ancestors = list(wasted._ancestors(top))
    assert len(ancestors) == 10 and len({id(x) for x in ancestors}) == 10  # 9 sums below it, and w


def test_the_ancestor_search_goes_past_a_value_it_has_seen():
    w = nn.Parameter(ndl.Tensor([1.0]))
    t = ndl.Tensor([1.0], requires_grad=True)
    p = ndl.ops.exp(t)
    top = w * 3.0 + p * p  # searched depth first: p is met twice before the branch through w
    assert wasted._reaches_parameter(top)
