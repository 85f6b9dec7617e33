"""Module.load_state_dict refuses input that is not a state dict, and changes nothing when it does."""
import numpy as np
import pytest

from needle import nn
from needle.nn.module import StateDictError


def model_and_weights():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    return model, {name: array.copy() for name, array in model.state_dict().items()}


def assert_unchanged(model, before):
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


@pytest.mark.parametrize("bad", [None, "weights.npz", [np.ones(3)], 3])
def test_something_other_than_a_dict_raises_type_error_naming_it(bad):
    model, before = model_and_weights()
    with pytest.raises(TypeError, match=f"needs a dict of name -> array.*got {type(bad).__name__}"):
        model.load_state_dict(bad)
    assert_unchanged(model, before)


@pytest.mark.parametrize("bad_value, message", [
    (np.array(["1", "2", "3"]), "must be a real numeric array, got dtype <U1"),
    (np.array([1 + 2j, 0, 0]), "must be a real numeric array, got dtype complex128"),
    ([[1.0], [1.0, 2.0]], "not an array"),
    (object(), "must be a real numeric array, got dtype object"),
])
def test_a_non_numeric_entry_is_refused_and_nothing_is_loaded(bad_value, message):
    model, before = model_and_weights()
    state = {name: np.zeros_like(array) for name, array in before.items()}  # would change everything
    state["1.bias"] = bad_value
    with pytest.raises(StateDictError, match=message):
        model.load_state_dict(state)
    assert_unchanged(model, before)
