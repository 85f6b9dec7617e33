"""Trainer.fit notes, once, graphs that earlier code keeps alive, naming a holder it can find."""
import sys
import warnings

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Trainer
from trainers.earlier_graphs import EarlierGraphsWarning, graph_holders


def make_trainer():
    np.random.seed(0)
    model = ndl.nn.Linear(2, 2)
    return Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), progress=False)


def loader():
    X = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    return DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8)


def test_a_fit_with_graphs_kept_by_a_global_names_it_once(monkeypatch):
    x = ndl.Tensor([1.0, 2.0])
    total = 0
    for _ in range(5):
        total = total + (x * x).sum()  # a cell's `total`: 10 nodes kept
    monkeypatch.setattr(sys.modules["__main__"], "total", total, raising=False)
    trainer = make_trainer()
    with pytest.warns(EarlierGraphsWarning) as caught:
        trainer.fit(loader(), epochs=1)
    (warning,) = caught
    message = str(warning.message)
    assert "graph nodes were alive before training started: kept by earlier code, e.g. `total`" in message
    assert "`del total`" in message
    assert warning.filename == __file__  # at the user's fit() line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit(loader(), epochs=1)  # said once per trainer


def test_without_a_findable_holder_it_says_what_to_do():
    kept = [ndl.Tensor([1.0]) * 2]  # in a local list: no global names it
    with pytest.warns(EarlierGraphsWarning, match=r"kept by earlier code \(a variable or container.*`del`"):
        make_trainer().fit(loader(), epochs=1)
    del kept


def test_nothing_alive_means_no_note(monkeypatch):
    from needle import autograd
    from trainers import earlier_graphs

    counters = autograd.snapshot()
    monkeypatch.setattr(earlier_graphs.autograd, "snapshot", lambda: counters._replace(live_nodes=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert earlier_graphs.note_earlier_graphs() == 0


def test_holders_are_tensors_with_a_graph_largest_first():
    leaf = ndl.Tensor([1.0])
    small, large = leaf * 2, ((leaf * 2) * 3) * 4
    assert graph_holders([{"leaf": leaf, "small": small, "large": large, "_hidden": large * 5}]) == ["large", "small"]
