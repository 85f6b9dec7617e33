"""trainers.diagnosis.findings through the monitor: each kind of finding, with every field the
report reads (kind, lines, container name, holders, tuple state, scalar, the retained nodes)."""
import types
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim

import patterns
from patterns import BATCH, CLASSES, FEATURES, HIDDEN, START
from trainers import MemoryMonitor
from trainers.diagnosis import findings
from trainers.diagnosis.findings import is_scalar, user_frames


class Box:
    """A user's own linked record: no list, dict or set holds what it keeps."""

    def __init__(self, value, previous):
        self.value, self.previous = value, previous


def boxed_losses(monitor, iterations, start=START):
    model, opt, loss_fn = patterns.classifier()
    chain = None
    for i, (x, y) in enumerate(patterns.data(iterations)):
        opt.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)  # line: boxed_loss
        loss.backward()
        opt.step()
        if i >= start:
            chain = Box(loss, chain)
        monitor.step()
    return chain


def line(name):
    with open(__file__) as handle:
        return next(n for n, text in enumerate(handle, 1) if text.rstrip().endswith(f"# line: {name}"))


def finding_of(loop, iterations=40, **options):
    """The monitor's latest finding, and what the loop returned (still alive)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with MemoryMonitor(warn="always") as monitor:
            kept = loop(monitor, iterations, **options)
    return monitor.last_finding, kept


def at(name):
    return (patterns.__file__, patterns.site(name))


def test_a_graph_held_outside_any_container_is_named_where_it_is_made():
    finding, chain = finding_of(boxed_losses)
    assert finding.kind == "held"
    assert finding.site == finding.created_site == (__file__, line("boxed_loss"))
    assert finding.scalar and finding.container_name is None and finding.holders == ()
    assert START <= finding.iteration < 40
    for _ in range(39 - finding.iteration):
        chain = chain.previous
    loss = chain.value  # the loss of the finding's iteration, which the chain still holds
    assert any(node is loss for node in finding.retained_nodes)
    assert all(node is not chain.previous.value for node in finding.retained_nodes)  # one iteration's only


def test_a_container_finding_names_the_adding_line_the_making_line_and_the_container():
    finding, _ = finding_of(patterns.curve_every, every=1)
    assert finding.kind == "container"
    assert finding.site == at("curve")
    assert finding.created_site == (patterns.__file__, patterns.site("curve") - 4)  # loss = loss_fn(...)
    assert finding.container_name == "curve" and finding.scalar
    assert START <= finding.iteration < 40


def test_a_container_of_model_outputs_is_not_scalar():
    finding, _ = finding_of(patterns.kept_for_confusion_matrix)
    assert finding.kind == "container" and finding.site == finding.created_site == at("kept")
    assert finding.container_name == "kept" and not finding.scalar


def test_nested_and_helper_containers_are_named_as_the_user_spells_them():
    nested, _ = finding_of(patterns.nested_dict_history)
    assert nested.container_name == 'hist["train"]["loss"]' and nested.site == at("nested_dict")
    logged, _ = finding_of(patterns.logged_through_a_helper)
    assert logged.container_name == "self.values" and logged.site == at("logger_append")


def test_a_carried_tensor_state_names_its_holder():
    finding, _ = finding_of(patterns.recurrent_run)
    assert finding.kind == "carried_state" and finding.site == at("recurrent")
    assert finding.holders == ("h",) and not finding.state_is_tuple and not finding.scalar
    assert START <= finding.iteration < 40


def test_a_carried_tuple_state_is_a_tuple():
    finding, _ = finding_of(patterns.recurrent_run, state="tuple")
    assert finding.kind == "carried_state" and finding.site == at("recurrent")
    assert finding.holders == ("h",) and finding.state_is_tuple


def test_a_state_kept_on_the_model_is_named_by_the_line_assigning_it():
    finding, _ = finding_of(patterns.state_kept_on_the_model)
    assert finding.kind == "carried_state" and finding.site == at("stateful")
    assert finding.holders == () and not finding.state_is_tuple


def test_an_accumulated_scalar_is_an_accumulation_at_its_line():
    finding, _ = finding_of(patterns.progress_sum_every, every=1)
    assert finding.kind == "accumulation" and finding.site == at("progress_sum")
    assert finding.scalar and finding.holders == () and not finding.state_is_tuple
    assert START <= finding.iteration < 40


def test_an_evaluation_finding_counts_one_iterations_graph():
    finding, _ = finding_of(patterns.eval_argmax)
    assert finding.kind == "missing_no_grad" and finding.site == at("eval_argmax")
    assert finding.iteration == 1  # the iteration after the first: one untrained forward tells
    assert finding.nodes_made == 3  # Linear, ReLU, Linear
    assert finding.bytes_made == 4 * BATCH * (HIDDEN + HIDDEN + CLASSES)  # float32 outputs
    assert finding.kept_alive is False


def test_an_evaluation_whose_outputs_are_kept_says_so():
    finding, _ = finding_of(patterns.eval_kept)
    assert finding.kind == "missing_no_grad" and finding.site == at("eval_kept")
    assert finding.kept_alive is True and finding.nodes_made == 3


def fake_stack(*filenames):
    """Frame-like objects, innermost first, in these files."""
    frame = None
    for name in reversed(filenames):
        frame = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=name), f_back=frame)
    return frame


def test_user_frames_skip_the_framework_and_stop_at_depth():
    framework = findings.__file__  # trainers/diagnosis/findings.py
    frames = user_frames(fake_stack("loop.py", framework, "cell.py", framework))
    assert [f.f_code.co_filename for f in frames] == ["loop.py", "cell.py"]
    assert len(user_frames(fake_stack(*[f"user{n}.py" for n in range(14)]))) == 12
    assert len(user_frames(fake_stack("a.py", "b.py", "c.py"), depth=2)) == 2
    assert user_frames(None) == []


def test_is_scalar_is_one_element_and_false_without_a_shape():
    import needle as ndl

    assert is_scalar(ndl.Tensor([[3.0]])) and not is_scalar(ndl.Tensor([1.0, 2.0]))
    assert is_scalar(object()) is False


class TwoOutputCell(nn.Module):
    """Returns (output, state) made on one line: the state is told from the output by its op or shape."""

    def __init__(self, same_op):
        super().__init__()
        self.ih, self.hh = nn.Linear(FEATURES, HIDDEN), nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.out = nn.Linear(HIDDEN, HIDDEN if not same_op else CLASSES)
        self.second = ndl.ops.tanh if same_op else ndl.ops.relu

    def forward(self, x, h):
        mixed = self.ih(x) + self.hh(h)
        return self.second(self.out(mixed)), ndl.ops.tanh(mixed)


def two_output_state(monitor, iterations, same_op):
    previous = None  # an alias of the state, first among the loop's locals
    np.random.seed(0)
    cell = TwoOutputCell(same_op)
    opt = optim.SGD(cell.parameters(), lr=0.01)
    h = ndl.Tensor(np.zeros((BATCH, HIDDEN), dtype="float32"))
    for i, (x, y) in enumerate(patterns.data(iterations)):
        if i < START:
            h = h.detach()
        out, h = cell(x, h)  # line: two_outputs
        previous = h
        loss = (out * out).sum()
        opt.reset_grad()
        loss.backward()
        opt.step()
        monitor.step()
    return previous


@pytest.mark.parametrize("same_op", [True, False])
def test_of_two_values_made_on_one_line_the_carried_one_is_the_state(same_op):
    finding, _ = finding_of(two_output_state, same_op=same_op)
    assert finding.kind == "carried_state"
    assert finding.site == (__file__, line("two_outputs"))
    assert finding.holders == ("h",)  # not `out` (another op or shape), not the alias `previous`
    assert not finding.state_is_tuple


def forward(model, x):
    return model(x)


def evaluation_on_two_lines(monitor, iterations, helper=False):
    model, _, _ = patterns.classifier()
    probe = nn.Parameter(ndl.Tensor(np.ones((FEATURES, 1), dtype="float32")))
    for x, _ in patterns.data(iterations):
        (x @ probe).numpy()  # one node reading a weight
        (forward(model, x) if helper else model(x)).numpy()  # line: most_nodes
        monitor.step()


@pytest.mark.parametrize("helper", [False, True])
def test_an_evaluation_is_named_at_the_loop_line_making_most_nodes(helper):
    finding, _ = finding_of(evaluation_on_two_lines, helper=helper)
    assert finding.kind == "missing_no_grad"
    assert finding.site == (__file__, line("most_nodes"))  # in the loop, not inside the helper
