"""Module mechanics: finding parameters, modes, state dicts and devices."""
import numpy as np
import pytest

import needle as ndl
from needle import nn


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(2, 2)
        self.in_list = [nn.Linear(2, 3), (nn.BatchNorm1d(3), self.shared)]
        self.in_dict = {"head": nn.Linear(3, 1), "extra": nn.Parameter(ndl.init.ones(4))}
        self.again = self.shared.weight  # the same parameter a second time

    def forward(self, x):
        return self.in_dict["head"](self.in_list[1][0](self.in_list[0](self.shared(x))))


def test_parameters_found_in_lists_tuples_and_dicts_each_once():
    model = Nested()
    params = model.parameters()
    assert all(isinstance(p, nn.Parameter) for p in params)
    expected = [
        model.shared.weight,
        model.shared.bias,
        model.in_list[0].weight,
        model.in_list[0].bias,
        model.in_list[1][0].weight,
        model.in_list[1][0].bias,
        model.in_dict["head"].weight,
        model.in_dict["head"].bias,
        model.in_dict["extra"],
    ]
    assert len(params) == len(expected) and all(a is b for a, b in zip(params, expected))
    assert model.in_list[1][0].running_mean not in [id(p) for p in params]
    assert all(p is not model.in_list[1][0].running_mean for p in params)


def test_children_modules_and_course_children():
    model = Nested()
    linear, batchnorm, head = model.in_list[0], model.in_list[1][0], model.in_dict["head"]
    assert model.children() == [model.shared, linear, batchnorm, head]
    assert model._children() == [model.shared, linear, batchnorm, head]
    assert model.modules() == [model, model.shared, linear, batchnorm, head]
    outer = nn.Sequential(model, nn.ReLU())
    assert outer._children()[:3] == [model, model.shared, linear]


def test_train_and_eval_switch_every_submodule():
    model = nn.Sequential(Nested(), nn.Residual(nn.Sequential(nn.Dropout(0.1), nn.ReLU())))
    everything = model.modules()
    assert len(everything) == 10 and all(m.training for m in everything)
    assert model.eval() is model
    assert not any(m.training for m in everything)
    assert model.train() is model
    assert all(m.training for m in everything)


def test_a_module_that_refers_to_itself_is_walked_once():
    model = nn.Linear(2, 2)
    model.me = model
    assert len(model.parameters()) == 2 and model.modules() == [model]


def test_state_dict_names_and_copies():
    model = Nested()
    state = model.state_dict()
    assert list(state) == [
        "shared.weight",
        "shared.bias",
        "in_list.0.weight",
        "in_list.0.bias",
        "in_list.1.0.weight",
        "in_list.1.0.bias",
        "in_list.1.0.running_mean",
        "in_list.1.0.running_var",
        "in_dict.head.weight",
        "in_dict.head.bias",
        "in_dict.extra",
    ]
    assert all(isinstance(v, np.ndarray) for v in state.values())
    state["shared.weight"][...] = 42  # a copy: the model must not change
    assert not np.any(model.shared.weight.numpy() == 42)
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.BatchNorm1d(2))
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "2.running_mean", "2.running_var"]


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_state_dict_round_trip_keeps_parameter_identity():
    np.random.seed(0)
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    source(ndl.Tensor(np.random.randn(8, 3)))  # moves the running statistics
    target = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    weight = target.modules[0].weight
    target.load_state_dict(source.state_dict())
    assert target.modules[0].weight is weight
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    x = ndl.Tensor(np.random.randn(5, 3))
    source.eval(), target.eval()
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())


def test_loaded_arrays_do_not_alias_the_state_dict():
    model = nn.Linear(2, 2)
    state = {"weight": np.zeros((2, 2), dtype=np.float32), "bias": np.zeros((1, 2), dtype=np.float32)}
    model.load_state_dict(state)
    state["weight"][...] = 7
    assert np.all(model.weight.numpy() == 0)


def _assert_unchanged(model, before):
    for (name, a), b in zip(before.items(), model.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_load_state_dict_errors_name_the_key_and_change_nothing():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    before = model.state_dict()
    good = {name: np.full_like(value, 5) for name, value in before.items()}

    missing = dict(good)
    del missing["1.running_var"]
    with pytest.raises(KeyError, match=r"missing keys: \['1.running_var'\]"):
        model.load_state_dict(missing)
    _assert_unchanged(model, before)

    unexpected = dict(good, **{"2.weight": np.ones(3)})
    with pytest.raises(KeyError, match=r"unexpected keys: \['2.weight'\]"):
        model.load_state_dict(unexpected)
    _assert_unchanged(model, before)

    misshaped = dict(good, **{"0.bias": np.ones((3,), dtype=np.float32)})
    with pytest.raises(ValueError, match=r"'0.bias': the checkpoint has shape \(3,\), the module has \(1, 3\)"):
        model.load_state_dict(misshaped)
    _assert_unchanged(model, before)  # the good entries before the bad one were not assigned


def test_load_state_dict_non_strict_skips_names_but_checks_shapes():
    model = nn.Linear(2, 3)
    bias = model.bias.numpy().copy()
    model.load_state_dict({"weight": np.ones((2, 3)), "other": np.ones(1)}, strict=False)
    np.testing.assert_array_equal(model.weight.numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(model.bias.numpy(), bias)
    assert model.weight.dtype == np.float32
    with pytest.raises(ValueError, match="weight"):
        model.load_state_dict({"weight": np.ones((3, 2))}, strict=False)


def test_to_moves_parameters_and_buffers(cuda_device):
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    weight = model.modules[0].weight
    expected = model.state_dict()
    assert model.to(cuda_device) is model
    assert model.modules[0].weight is weight
    assert all(t.device is cuda_device for t in model.parameters())
    assert model.modules[1].running_mean.device is cuda_device
    for (name, a), b in zip(expected.items(), model.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    out = model(ndl.Tensor(np.ones((4, 2), dtype=np.float32), device=cuda_device))
    assert out.device is cuda_device


def test_to_the_same_device_keeps_the_arrays():
    model = nn.Linear(2, 2)
    raw = model.weight.cached_data.raw
    model.to(ndl.cpu())
    assert model.weight.cached_data.raw is raw


def test_forward_must_be_defined():
    with pytest.raises(NotImplementedError, match="Bare must define forward"):
        type("Bare", (nn.Module,), {})()(1)
