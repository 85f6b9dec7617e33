"""What a leak keeps, spelled and drawn from a finding's retained nodes: the summary line and explain()."""
import numpy as np
import pytest

import needle as ndl
from needle import viz
from trainers.diagnosis.evidence import Finding
from trainers.diagnosis.report import accumulation_fix, explain, explain_dot, freeze, graph_leak_message, retained_summary

NOTHING = "no leak found yet: nothing to explain (MemoryMonitor.explain shows the last finding)"


@pytest.fixture
def loop(tmp_path):
    """A source file with the loop's lines, and one iteration's graph carried from an earlier one."""
    source = tmp_path / "loop.py"
    source.write_text("loss = (x * w).sum()\ntotal = total + loss\nlog.append(loss)\na = b = total + loss\n")
    w = ndl.Tensor(np.ones(3, dtype="float32"), requires_grad=True)
    x = ndl.Tensor(np.full(3, 2.0, dtype="float32"), requires_grad=False)
    total = (x * w).sum()  # the earlier iteration's graph
    product = x * w
    loss = product.sum()
    new_total = total + loss
    return str(source), (product, loss, new_total), (w, x, total)


def test_the_summary_spells_the_iterations_graph_with_the_carried_name(loop):
    source, nodes, _ = loop
    finding = Finding("accumulation", (source, 2), retained_nodes=nodes)
    assert retained_summary(finding, 5000) == (
        "each iteration keeps: EWiseAdd(<previous total>, Summation(EWiseMul(const, leaf))) — 3 nodes, 5.00 KB"
    )
    # without a measured growth: the buffers only this graph holds (the batch x is held outside it too)
    assert retained_summary(finding) == (
        "each iteration keeps: EWiseAdd(<previous total>, Summation(EWiseMul(const, leaf))) — 3 nodes, 20 B"
    )
    assert retained_summary(Finding("carried_state", (source, 2), holders=("h",), retained_nodes=nodes), 10).startswith(
        "each iteration keeps: EWiseAdd(<previous h>, "
    )
    assert retained_summary(Finding("accumulation", None, retained_nodes=nodes), 10).startswith(
        "each iteration keeps: EWiseAdd(<earlier iteration>, "
    )
    for line in (3, 4):  # no single assignment: nothing names what carries the graph
        assert retained_summary(Finding("accumulation", (source, line), retained_nodes=nodes), 10).startswith(
            "each iteration keeps: EWiseAdd(<earlier iteration>, "
        )
    container = Finding("container", (source, 2), retained_nodes=nodes)
    assert retained_summary(container, 10).startswith("each iteration keeps: EWiseAdd(<earlier iteration>, ")
    assert retained_summary(Finding("accumulation", (source, 2))) is None


def test_the_summary_counts_the_batch_only_the_graph_keeps():
    weight = ndl.Tensor(np.ones((3, 5), dtype="float32"), requires_grad=True)  # 60 B, not counted: a weight
    batch = ndl.Tensor(np.ones((1, 3), dtype="float32"), requires_grad=False)  # 12 B
    product = batch @ weight  # 20 B
    alone = retained_summary(Finding("held", None, retained_nodes=(product,)))
    shared = batch.detach()  # another value now holds the batch's buffer
    kept = retained_summary(Finding("held", None, retained_nodes=(product,)))
    del shared
    assert kept == "each iteration keeps: MatMul(const, leaf) — 1 nodes, 20 B", "the batch is held outside the graph"
    assert alone == "each iteration keeps: MatMul(const, leaf) — 1 nodes, 32 B"


def test_the_summary_spells_two_tops_and_counts_the_others(loop):
    _, _, (w, x, _) = loop
    one, two, three = x * w, x + w, x - w
    assert retained_summary(Finding("held", None, retained_nodes=(one, two)), 10) == (
        "each iteration keeps: EWiseMul(const, leaf); EWiseAdd(const, leaf) — 2 nodes, 10 B"
    )
    assert retained_summary(Finding("held", None, retained_nodes=(one, two, three)), 10) == (
        "each iteration keeps: EWiseMul(const, leaf); EWiseAdd(const, leaf); and 1 more — 3 nodes, 10 B"
    )


def test_the_summary_spells_three_levels_deep(loop):
    _, _, (w, _, _) = loop
    deep = ((((w * 2.0) + 1.0) * 3.0) + 4.0).sum()
    nodes = tuple(node for node in ndl.autograd.find_topo_sort([deep]) if node.op is not None)
    assert retained_summary(Finding("held", None, retained_nodes=nodes), 10) == (
        f"each iteration keeps: {viz.expression(deep, within={id(n) for n in nodes}, outside='<earlier iteration>', depth=3)}"
        " — 5 nodes, 10 B"
    )
    assert retained_summary(Finding("held", None, retained_nodes=nodes), 10).startswith(
        "each iteration keeps: Summation(AddScalar(MulScalar(…)))"
    )


def test_the_warning_gives_the_summary_with_the_measured_growth(loop):
    source, nodes, _ = loop
    kept = "\n  each iteration keeps: EWiseAdd(<previous total>, Summation(EWiseMul(const, leaf))) — 3 nodes, 2.50 KB"
    accumulation = graph_leak_message(Finding("accumulation", (source, 2), retained_nodes=nodes), (3, 2500, 1, True), 9, 40)
    assert f"reachable through it.{kept} (monitor.explain() shows the chain)\n  Fix: " in accumulation
    held = graph_leak_message(Finding("held", (source, 2), retained_nodes=nodes), (3, 2500, 1, True), 9, 40)
    assert f"keeps a reference to them.{kept} (monitor.explain() shows the chain)\n  Fix: " in held
    container = graph_leak_message(Finding("container", (source, 3), container_name="log", retained_nodes=nodes[:2]),
                                   (3, 2500, 1, True), 9, 40)
    assert ("from every iteration.\n  each iteration keeps: Summation(EWiseMul(const, leaf)) — 2 nodes, 2.50 KB "
            "(monitor.explain() shows the chain)\n  Fix: ") in container


def test_the_warning_fixes_a_tensor_accumulation_with_numpy_not_float(loop):
    source, _, _ = loop
    message = graph_leak_message(Finding("accumulation", (source, 2), scalar=False), (3, 2500, 1, True), 9, 40)
    assert message.endswith(f"Fix: {accumulation_fix('total = total + loss', scalar=False)}")
    assert "`total = total + loss.numpy()`" in message


def test_explain_writes_the_kind_the_line_the_summary_and_the_graph(loop):
    source, nodes, _ = loop
    finding = Finding("carried_state", (source, 2), holders=("total",), retained_nodes=nodes)
    assert explain(finding) == "\n".join([
        f"leak (carried state) at {source}:2: total = total + loss",
        retained_summary(finding),
        viz.format_graph(nodes[2], values=False),
    ])
    assert "[2. 2. 2.]" not in explain(finding), "no values: the graph's shape is the point"
    made_at = Finding("held", None, created_site=(source, 1), retained_nodes=nodes)
    assert explain(made_at).startswith(f"leak (held) at {source}:1: loss = (x * w).sum()\n")
    assert explain(Finding("held", None, retained_nodes=nodes)).startswith("leak (held) at ?\n")


def test_explain_of_a_container_says_what_holds_the_other_graphs(loop):
    source, nodes, _ = loop
    named = Finding("container", (source, 3), container_name="log", retained_nodes=nodes[:2])
    assert explain(named).endswith("\n  … and a graph like this one for every earlier iteration, held by `log`")
    unnamed = Finding("container", (source, 3), retained_nodes=nodes[:2])
    assert explain(unnamed).endswith("\n  … and a graph like this one for every earlier iteration, held by the container")


def test_without_a_finding_or_its_graph_there_is_nothing_to_explain():
    assert explain(None) == NOTHING
    assert explain(Finding("container", None)) == NOTHING
    assert explain_dot(None) is None


def test_explain_writes_dot_or_renders_to_a_path(loop, tmp_path, monkeypatch):
    source, nodes, _ = loop
    finding = Finding("accumulation", (source, 2), retained_nodes=nodes)
    dot_path = tmp_path / "leak.dot"
    assert explain(finding, dot_path) == str(dot_path)
    assert dot_path.read_text() == viz.to_dot(nodes[2]) == explain_dot(finding)
    rendered = []
    monkeypatch.setattr(viz, "render", lambda root, path: rendered.append((root, path)) or path)
    assert explain(finding, tmp_path / "leak.svg") == str(tmp_path / "leak.svg")
    assert rendered == [(nodes[2], str(tmp_path / "leak.svg"))]


def test_a_frozen_finding_explains_what_it_drew_once_its_graph_is_gone(loop, tmp_path, monkeypatch):
    source, nodes, _ = loop
    finding = Finding("accumulation", (source, 2), retained_nodes=nodes)
    freeze(finding)
    text, dot = explain(finding), explain_dot(finding)
    finding.retained_nodes = ()
    assert finding.frozen_text == text and finding.frozen_dot == dot
    assert explain(finding) == text and explain_dot(finding) == dot
    dot_path = tmp_path / "frozen.dot"
    assert explain(finding, dot_path) == str(dot_path) and dot_path.read_text() == dot
    piped = []

    def pipe(source_text, output_format):
        piped.append((source_text, output_format))
        return b"drawn"

    import needle.viz.dot

    monkeypatch.setattr(needle.viz.dot, "_pipe", pipe)
    png = tmp_path / "frozen.PNG"
    assert explain(finding, png) == str(png)
    assert piped == [(dot, "png")] and png.read_bytes() == b"drawn"
    assert explain(finding, tmp_path / "frozen.XDOT") == str(tmp_path / "frozen.XDOT")
    assert piped[-1] == (dot, "xdot")
    freeze(Finding("container", None))  # nothing retained: nothing drawn, nothing raised


def test_the_container_fix_follows_the_path_to_the_tensor(loop, tmp_path):
    import sys

    from trainers.diagnosis.adding_line import find_adding_line

    def appends_pair(log, step, loss):
        if log is None:
            log.append((step, loss))
        return find_adding_line(log, sys._getframe())

    source, nodes, _ = loop
    finding = Finding("container", (source, 3), container_name="log", scalar=True)
    finding.holder_path = (("index", 1),)
    message = graph_leak_message(finding, (3, 10, 1, True), 5, 9, adding=appends_pair([], 1, 2))
    assert message.endswith("Fix: store a Python number where the tensor sits: `log.append((step, loss.item()))`.")
