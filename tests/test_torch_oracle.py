"""The optional PyTorch oracle: hidden on request, absent when not installed, so that the numpy
checks of tests/nn/test_nn_conv.py and test_nn_sequence.py run exactly as in CI."""
import sys

from torch_oracle import optional_torch


def test_the_switch_hides_torch(monkeypatch):
    monkeypatch.setenv("NEEDLE_TESTS_WITHOUT_TORCH", "1")
    assert optional_torch() is None


def test_without_torch_installed_there_is_none(monkeypatch):
    monkeypatch.delenv("NEEDLE_TESTS_WITHOUT_TORCH", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` meets where it is not installed
    assert optional_torch() is None


def test_torch_is_given_where_installed_and_not_hidden(monkeypatch):
    monkeypatch.setenv("NEEDLE_TESTS_WITHOUT_TORCH", "0")
    fake = type(sys)("torch")
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert optional_torch() is fake
