"""print_graph and node_line: the lecture's graph, shared nodes, collapsed chains, lazy nodes."""
import io
import re

import numpy as np
import pytest

import needle as ndl
from needle import viz


pytestmark = pytest.mark.needle_backend("nd")  # asserts the float32 default

def graph_text(tensor, **options):
    out = io.StringIO()
    viz.print_graph(tensor, file=out, **options)
    return out.getvalue().splitlines()


def parse_lines(lines):
    """name -> (kind, [input names]) for each node line."""
    nodes = {}
    for line in lines[1:]:
        match = re.match(r"\s+(v\d+) = (\w+)(?:\(([^)]*)\))?", line)
        if match:
            name, kind, inputs = match.groups()
            nodes[name] = (kind, [i.strip() for i in inputs.split(",")] if inputs else [])
    return nodes


def lecture_graph():
    v1 = ndl.Tensor([0.0])
    v2 = ndl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    return v1, v2, v3, v4


def test_lecture_graph_has_its_ops_edges_and_one_line_per_node():
    v1, v2, v3, v4 = lecture_graph()
    lines = graph_text(v4)
    nodes = parse_lines(lines)
    assert len(nodes) == 4 and len(lines) == 5  # a header and one line each: v2 is printed once
    names = {kind: name for name, (kind, _) in nodes.items()}
    mul, add, exp, leaf = names["EWiseMul"], names["AddScalar"], names["Exp"], names["leaf"]
    assert (leaf, exp, add, mul) == ("v1", "v2", "v3", "v4")  # the lecture's own names
    assert nodes[mul][1] == [exp, add]  # v4 <- v2, v3
    assert nodes[add][1] == [exp]  # v3 <- v2
    assert nodes[exp][1] == [leaf]
    assert nodes[leaf][1] == []
    exp_line = next(line for line in lines if f"{exp} = Exp" in line)
    assert "used by 2 nodes" in exp_line
    assert lines[1].lstrip().startswith(f"{mul} = EWiseMul")  # output first, leaves last
    assert lines[-1].lstrip().startswith(f"{leaf} = leaf")


def test_node_line_shows_shape_dtype_device_requires_grad_and_values():
    v1, v2, v3, v4 = lecture_graph()
    line = viz.node_line(v4)
    assert f"id{id(v4)} = EWiseMul(id{id(v2)}, id{id(v3)})" in line
    assert "shape=(1,)" in line and "float32" in line and "cpu" in line
    assert "requires_grad=True" in line and line.endswith("[2.]")
    assert not viz.node_line(v4, values=False).endswith("[2.]")


def test_constants_and_parameters_are_named_as_such():
    w = ndl.nn.Parameter(ndl.init.ones(3, 2))
    x = ndl.Tensor(np.ones((1, 3)), requires_grad=False)
    kinds = [kind for kind, _ in parse_lines(graph_text(x @ w)).values()]
    assert sorted(kinds) == ["MatMul", "Parameter", "const"]


def test_the_lectures_hundred_iteration_sum_loss_collapses_to_a_few_lines():
    x = ndl.Tensor([1.0])
    sum_loss = ndl.Tensor([0.0])
    for _ in range(100):
        sum_loss = sum_loss + x * x
    lines = graph_text(sum_loss)
    assert len(lines) < 20
    collapsed = [line for line in lines if "more EWiseAdd nodes" in line]
    assert len(collapsed) == 1 and "97 more" in collapsed[0] and "one per iteration" in collapsed[0]
    assert "202 nodes" in lines[0]
    full = graph_text(sum_loss, collapse=False, max_nodes=1000)
    assert len(full) == 203


def test_collapsing_hides_each_iterations_side_graph_but_keeps_shared_leaves():
    w = ndl.nn.Parameter(ndl.init.ones(4, 1))
    total = ndl.Tensor([0.0])
    for i in range(30):
        x = ndl.Tensor(np.full((2, 4), float(i)), requires_grad=False)
        total = total + (x @ w).sum().reshape((1,))
    lines = graph_text(total)
    assert len(lines) < 30
    assert sum("Parameter" in line for line in lines) == 1
    assert any("more EWiseAdd nodes" in line for line in lines)


def test_max_nodes_counts_what_it_leaves_out():
    x = ndl.Tensor([1.0])
    y = x
    for _ in range(10):
        y = ndl.tanh(y)
    lines = graph_text(y, max_nodes=3, collapse=False)
    assert len(lines) == 5 and "8 more nodes not shown (max_nodes=3)" in lines[-1]


def test_python_ids_on_request():
    v1, v2, v3, v4 = lecture_graph()
    assert any(f"id={id(v2):#x}" in line for line in graph_text(v4, python_ids=True))


def test_printing_computes_nothing_in_lazy_mode():
    saved = ndl.autograd.LAZY_MODE
    ndl.autograd.LAZY_MODE = True
    try:
        x = ndl.Tensor([1.0, 2.0])
        y = ndl.exp(x) * 2
        lines = graph_text(y)
        assert y.cached_data is None
        assert "shape=?" in lines[1] and "not computed yet" in lines[1]
    finally:
        ndl.autograd.LAZY_MODE = saved


def test_graph_stats_counts_by_kind_bytes_and_depth():
    w = ndl.nn.Parameter(ndl.init.ones(3, 2))
    x = ndl.Tensor(np.ones((4, 3)), requires_grad=False)
    loss = ndl.relu(x @ w).sum()
    stats = viz.graph_stats(loss)
    assert stats.by_kind == {"Parameter": 1, "const": 1, "MatMul": 1, "ReLU": 1, "Summation": 1}
    assert stats.nodes == 5 and stats.depth == 3
    assert stats.bytes == 4 * (6 + 12 + 8 + 8 + 1)


def test_expression_spells_one_iteration_with_earlier_nodes_named():
    w = ndl.nn.Parameter(ndl.init.ones(3, 1))
    x = ndl.Tensor(np.ones((2, 3)), requires_grad=False)
    total = ndl.Tensor([0.0])
    total = total + (x @ w).sum()
    before = {id(n) for n in ndl.autograd.find_topo_sort([total])}
    total = total + (x @ w).sum()
    this_iteration = {id(n) for n in ndl.autograd.find_topo_sort([total])} - before
    text = viz.expression(total, within=this_iteration, outside="<previous total>")
    assert text == "EWiseAdd(<previous total>, Summation(MatMul(const, Parameter)))"
    assert viz.expression(total, depth=1) == "EWiseAdd(…, …)"
    assert len(viz.expression(total, max_length=10)) == 10
