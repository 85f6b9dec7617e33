"""to_dot is valid DOT with the graph's structure; render and graph need graphviz, and say so."""
import builtins
import shutil

import numpy as np
import pytest

import needle as ndl
from needle import viz


# pydot's parser calls pyparsing names that pyparsing 3.3 deprecates
parses_dot = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def mlp_step():
    model = ndl.nn.Sequential(ndl.nn.Linear(4, 3), ndl.nn.ReLU(), ndl.nn.Linear(3, 2))
    x = ndl.Tensor(np.ones((5, 4)), requires_grad=False)
    y = ndl.Tensor(np.array([0, 1, 0, 1, 1]), requires_grad=False)
    return ndl.nn.SoftmaxLoss()(model(x), y)


@parses_dot
def test_to_dot_parses_and_has_a_box_per_op_and_an_edge_per_input():
    pydot = pytest.importorskip("pydot")
    loss = mlp_step()
    (graph,) = pydot.graph_from_dot_data(viz.to_dot(loss))
    order = ndl.autograd.find_topo_sort([loss])
    ops = [n for n in order if n.op is not None]
    boxes = [n for n in graph.get_nodes() if n.get_shape() == "box"]
    ellipses = [n for n in graph.get_nodes() if n.get_shape() == "ellipse"]
    assert len(boxes) == len(ops) and len(ellipses) == len(order)
    assert len(graph.get_edges()) == len(ops) + sum(len(n.inputs) for n in ops)
    parameters = [n for n in ellipses if "Parameter" in n.get_label()]
    assert len(parameters) == 4 and all(n.get_fillcolor() for n in parameters)
    outputs = [n for n in ellipses if n.get("peripheries") == "2"]
    assert len(outputs) == 1


@parses_dot
def test_to_dot_collapses_a_loops_chain_into_one_dashed_box():
    pydot = pytest.importorskip("pydot")
    x = ndl.Tensor([1.0])
    total = ndl.Tensor([0.0])
    for _ in range(50):
        total = total + x * x
    (graph,) = pydot.graph_from_dot_data(viz.to_dot(total))
    dashed = [n for n in graph.get_nodes() if n.get_style() == "dashed"]
    assert len(dashed) == 1 and "47 EWiseAdd" in dashed[0].get_label()
    assert len(graph.get_nodes()) < 20


@pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz dot program is not installed")
def test_render_writes_svg_and_png(tmp_path):
    pytest.importorskip("graphviz")
    loss = mlp_step()
    svg = viz.render(loss, tmp_path / "step.svg")
    with open(svg) as stream:
        assert stream.read().lstrip().startswith(("<?xml", "<svg"))
    png = viz.render(loss, tmp_path / "step.png")
    with open(png, "rb") as stream:
        assert stream.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in viz.graph(loss)._repr_svg_()


def test_render_rejects_an_unknown_extension(tmp_path):
    with pytest.raises(ValueError, match=r"\.svg, \.png or \.pdf"):
        viz.render(mlp_step(), tmp_path / "step.jpeg")


def test_render_without_graphviz_names_what_to_install(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_graphviz(name, *args, **kwargs):
        if name == "graphviz":
            raise ImportError("No module named 'graphviz'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_graphviz)
    with pytest.raises(viz.GraphvizMissingError, match=r"needle-dl\[viz\].*apt-get install graphviz"):
        viz.render(mlp_step(), tmp_path / "step.svg")
    assert not list(tmp_path.iterdir())
    drawing = viz.graph(mlp_step())
    assert drawing._repr_svg_() is None
    assert repr(drawing).startswith("graph of") and "SoftmaxCrossEntropy(" in repr(drawing)


def test_render_without_the_dot_program_names_it(tmp_path, monkeypatch):
    graphviz = pytest.importorskip("graphviz")

    def missing(*args, **kwargs):
        raise graphviz.ExecutableNotFound(["dot"])

    monkeypatch.setattr(graphviz.Source, "pipe", missing)
    with pytest.raises(viz.GraphvizMissingError, match="`dot` program was not found"):
        viz.render(mlp_step(), tmp_path / "step.svg")


def test_graph_without_graphviz_says_how_to_get_the_picture(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "graphviz" else real_find_spec(name, *a))
    text = repr(viz.graph(mlp_step()))
    assert text.startswith("graph of")
    assert text.splitlines()[-1].startswith("(for the picture, pip install 'needle-dl[viz]'")
    assert "Graphviz `dot` program" in text.splitlines()[-1]


def test_graph_without_the_dot_program_names_only_it(monkeypatch):
    import shutil

    pytest.importorskip("graphviz")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    last = repr(viz.graph(mlp_step())).splitlines()[-1]
    assert "install the Graphviz `dot` program" in last and "needle-dl[viz]" not in last


def test_graph_that_can_draw_adds_no_install_line(monkeypatch):
    import shutil

    pytest.importorskip("graphviz")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/dot")
    assert "for the picture" not in repr(viz.graph(mlp_step()))
