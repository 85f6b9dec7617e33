"""Every ndl.viz entry point refuses what is not a needle Tensor, saying what it needs."""
import numpy as np
import pytest

import needle as ndl
from needle import viz

ENTRY_POINTS = {
    "print_graph": lambda x: viz.print_graph(x),
    "format_graph": lambda x: viz.format_graph(x),
    "graph": lambda x: viz.graph(x),
    "to_dot": lambda x: viz.to_dot(x),
    "render": lambda x: viz.render(x, "never-written.svg"),
    "graph_stats": lambda x: viz.graph_stats(x),
    "expression": lambda x: viz.expression(x),
    "node_line": lambda x: viz.node_line(x),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(
    "given, described",
    [(np.zeros((2, 3)), "ndarray of shape (2, 3)"), ([1.0, 2.0], "list"), (None, "NoneType")],
)
def test_entry_points_name_what_they_need(name, given, described, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError) as caught:
        ENTRY_POINTS[name](given)
    message = str(caught.value)
    for words in (f"ndl.viz.{name} needs a needle Tensor", f"got {described}", "ndl.Tensor(x)", f"ndl.viz.{name}(loss)"):
        assert words in message
    assert not list(tmp_path.iterdir()), "render wrote nothing"


def test_a_needle_array_is_refused_too_and_a_tensor_tuple_is_taken():
    data = ndl.Tensor([1.0, 2.0]).realize_cached_data()
    with pytest.raises(TypeError, match="got NDArray of shape \\(2,\\)"):
        viz.print_graph(data)
    pieces = ndl.ops.split(ndl.Tensor([[1.0, 2.0]]), 0)
    assert viz.graph_stats(pieces).nodes == 2
