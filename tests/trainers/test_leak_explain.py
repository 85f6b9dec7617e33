"""What a leak keeps, shown: the warning's one-line summary and monitor.explain()."""
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from trainers import GraphLeakWarning, MemoryMonitor


def batches(count, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        x = ndl.Tensor(rng.standard_normal((8, 6)).astype("float32"), requires_grad=False)
        y = ndl.Tensor(rng.integers(0, 3, size=8), dtype="int64", requires_grad=False)
        yield x, y


def leaky_sum(monitor, iterations=30):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.05), nn.SoftmaxLoss()
    total_loss = 0.0
    for x, y in batches(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward(create_graph=False)
        opt.step()
        total_loss += loss
        monitor.step()
    return total_loss


def leaky_list(monitor, iterations=30):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.05), nn.SoftmaxLoss()
    losses = []
    for x, y in batches(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward(create_graph=False)
        opt.step()
        losses.append(loss)
        monitor.step()
    return losses


def first_warning(loop):
    monitor = MemoryMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = loop(monitor)
    leaks = [w for w in caught if issubclass(w.category, GraphLeakWarning)]
    assert leaks, "the leak was not warned"
    return monitor, str(leaks[0].message), kept


def test_the_warning_spells_one_iterations_retained_graph():
    monitor, message, _ = first_warning(leaky_sum)
    line = next(line for line in message.splitlines() if "each iteration keeps:" in line)
    assert "EWiseAdd(<previous total_loss>, SoftmaxCrossEntropy(LinearOp(" in line
    finding = monitor.last_finding
    kinds = sorted(type(n.op).__name__ for n in finding.retained_nodes if n.op is not None)
    assert kinds == ["EWiseAdd", "LinearOp", "LinearOp", "ReLU", "SoftmaxCrossEntropy"]
    assert "— 5 nodes" in line
    assert "monitor.explain()" in line


def test_a_container_leak_summarises_the_graph_each_entry_holds():
    _, message, losses = first_warning(leaky_list)
    line = next(line for line in message.splitlines() if "each iteration keeps:" in line)
    assert line.split("each iteration keeps: ")[1].startswith("SoftmaxCrossEntropy(LinearOp(")
    assert "<previous" not in line


def test_explain_returns_the_chain_collapsed_with_the_leaking_lines_ops(capsys):
    monitor, _, _ = first_warning(leaky_sum)
    explanation = monitor.explain()
    assert capsys.readouterr().out == ""  # shown once, by whoever displays it: never printed and returned
    text = str(explanation)
    assert repr(explanation) == text
    assert "leak (accumulation) at" in text and "total_loss += loss" in text
    assert "EWiseAdd(" in text and "SoftmaxCrossEntropy(" in text
    assert len(text.splitlines()) < 40


def test_explain_of_a_container_leak_says_what_holds_the_other_graphs(capsys):
    monitor, _, _ = first_warning(leaky_list)
    text = str(monitor.explain())
    assert "held by `losses`" in text and "SoftmaxCrossEntropy(" in text


def explained_to(path):
    monitor, _, _ = first_warning(leaky_sum)
    return monitor.explain(path)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's pyparsing calls
def test_explain_writes_dot_text_to_a_path(tmp_path):
    pydot = pytest.importorskip("pydot")
    # NOTE: pyparsing's cache keeps the parsing frames, and so this test's frame, alive: the leak
    # is made in a helper whose frame is gone by then.
    path = explained_to(tmp_path / "leak.dot")
    (graph,) = pydot.graph_from_dot_file(path)
    labels = " ".join(str(node.get_label()) for node in graph.get_nodes())
    assert "EWiseAdd" in labels and "SoftmaxCrossEntropy" in labels


def test_explain_before_any_leak_says_there_is_nothing(capsys):
    monitor = MemoryMonitor()
    assert "no leak found yet" in str(monitor.explain())
    assert monitor.last_finding is None


def test_explain_in_a_notebook_is_html_text_and_never_an_escaped_string():
    import html

    monitor, _, _ = first_warning(leaky_sum)
    explanation = monitor.explain()
    page = explanation._repr_html_()
    assert page.startswith("<pre") and html.escape(explanation.text) in page
    assert "\\n" not in page  # real line breaks, not the repr of a str
    assert "EWiseAdd" in explanation.dot


def test_explain_draws_the_graph_as_svg_where_graphviz_can(monkeypatch):
    import shutil

    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("the Graphviz dot program is not installed")
    monitor, _, _ = first_warning(leaky_sum)
    assert "<svg" in monitor.explain()._repr_html_()
