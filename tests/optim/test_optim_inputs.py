"""Optimizers refuse what cannot train, with errors that name the argument and the fix, and a
failed call (a step, a load) changes nothing."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, optim

MAKERS = {
    "sgd": lambda params: optim.SGD(params, lr=0.1),
    "sgd-momentum": lambda params: optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: optim.Adam(params, lr=0.1),
}


def two_params():
    return [nn.Parameter(ndl.Tensor([1.0, 2.0])), nn.Parameter(ndl.Tensor([[3.0]]))]


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_an_empty_parameter_list_is_refused(make):
    with pytest.raises(ValueError, match="empty parameter list.*model.parameters"):
        make([])


def test_a_used_up_generator_is_refused_and_says_why():
    model = nn.Linear(2, 2)
    params = (p for p in model.parameters())
    list(params)
    with pytest.raises(ValueError, match="already used up.*generator"):
        optim.SGD(params, lr=0.1)


def test_a_fresh_generator_works():
    model = nn.Linear(2, 2)
    assert len(optim.Adam(p for p in model.parameters()).params) == 2


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_a_module_instead_of_its_parameters_is_refused(make):
    with pytest.raises(TypeError, match=r"module Linear; pass model.parameters\(\)"):
        make(nn.Linear(2, 2))


def test_the_parameters_method_uncalled_is_refused():
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"got the function .*call it \(model.parameters\(\)\)"):
        optim.Adam(model.parameters)


def test_a_single_parameter_is_refused():
    with pytest.raises(TypeError, match=r"single Parameter of shape \(2,\); pass \[param\]"):
        optim.SGD(nn.Parameter(ndl.Tensor([1.0, 2.0])))


@pytest.mark.parametrize("params, message", [
    ([1, 2], "parameter 0 is a int"),
    ([nn.Parameter(ndl.Tensor([1.0])), np.zeros(2)], "parameter 1 is a ndarray"),
    (None, "iterable of parameters.*got NoneType"),
    ({"params": []}, "iterable of parameters.*got dict"),
])
def test_things_that_are_not_parameters_are_refused(params, message):
    with pytest.raises(TypeError, match=message):
        optim.SGD(params)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("name", ["lr", "weight_decay"])
def test_non_finite_hyperparameters_are_refused(name, value):
    for make in (optim.SGD, optim.Adam):
        with pytest.raises(ValueError, match=f"{name} must be a finite number, got {name}={value}"):
            make(two_params(), **{name: value})


def test_a_negative_learning_rate_is_refused():
    with pytest.raises(ValueError, match="lr must be >= 0, got lr=-1.0"):
        optim.Adam(two_params(), lr=-1.0)


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize("bad_grad", [[1.0], [[1.0, 2.0]], [1.0, 2.0, 3.0]], ids=["(1,)", "(1,2)", "(3,)"])
def test_a_gradient_of_the_wrong_shape_is_refused_and_nothing_moves(make, bad_grad):
    first, second = two_params()
    opt = make([first, second])
    second.grad = ndl.Tensor([[1.0]])
    first.grad = ndl.Tensor(bad_grad)  # Adam broadcast a (1,) gradient onto (2,) before
    before = [p.numpy().copy() for p in (first, second)]
    shape = str(tuple(np.shape(bad_grad))).replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ValueError, match=rf"parameter 0 \(shape \(2,\)\) has a gradient of shape {shape}"):
        opt.step()
    for param, was in zip((first, second), before):
        np.testing.assert_array_equal(param.numpy(), was)
    assert getattr(opt, "t", 0) == 0
    assert not getattr(opt, "m", {}) and not getattr(opt, "momentum_buffer", {})


def test_clip_grad_norm_of_float16_gradients_is_the_true_norm():
    w = nn.Parameter(ndl.Tensor(np.zeros(2, np.float16), dtype="float16"))
    w.grad = ndl.Tensor(np.array([300, 300], np.float16), dtype="float16")
    norm = optim.clip_grad_norm([w], 1000.0)
    assert norm == pytest.approx(424.26, abs=0.01)
    np.testing.assert_array_equal(w.grad.numpy(), [300, 300])
    optim.clip_grad_norm([w], 1.0)
    assert w.grad.dtype == np.float16
    np.testing.assert_allclose(w.grad.numpy().astype(np.float32), [0.7071, 0.7071], rtol=1e-3)


# ---- load_state_dict: all or nothing -------------------------------------------------------------

def trained_adam():
    params = two_params()
    opt = optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = ndl.Tensor(np.ones(p.shape, np.float32))
    opt.step()
    return params, opt


def snapshot(opt):
    return (
        {name: getattr(opt, name) for name in opt.hyperparameter_names},
        getattr(opt, "t", None),
        {name: {id(p): np.array(v) for p, v in getattr(opt, name).items()} for name in opt.state_names},
    )


def assert_unchanged(opt, before):
    hyper, t, state = snapshot(opt)
    assert hyper == before[0] and t == before[1]
    assert state.keys() == before[2].keys()
    for name in state:
        assert state[name].keys() == before[2][name].keys()
        for key in state[name]:
            np.testing.assert_array_equal(state[name][key], before[2][name][key])


@pytest.mark.parametrize("bad_t", [-1, 1.5, "3", None, True])
def test_adam_load_with_a_bad_t_changes_neither_lr_nor_m(bad_t):
    params, opt = trained_adam()
    good = opt.state_dict()
    changed = {**good, "hyperparameters": {**good["hyperparameters"], "lr": 0.5},
               "state": {0: {"m": np.full(2, 7.0), "v": np.ones(2)}}, "t": bad_t}
    before = snapshot(opt)
    with pytest.raises(ValueError, match="t \\(the number of steps taken\\) must be an int >= 0"):
        opt.load_state_dict(changed)
    assert_unchanged(opt, before)
    assert opt.lr == 0.1


@pytest.mark.parametrize("bad, error, message", [
    (None, TypeError, "needs the dict that optimizer.state_dict.. returned; got NoneType"),
    ("state", TypeError, "got str"),
    ({"hyperparameters": {"lr": 0.2}, "t": 1}, ValueError, 'no "state" entry'),
    ({"state": [1, 2], "t": 1}, ValueError, '"state" must be a dict'),
    ({"state": {0: {"m": np.zeros(2)}}, "t": 1}, ValueError, r"parameter 0: state \['m'\] lacks \['v'\]"),
    ({"state": {0: {"m": np.array(["a", "b"]), "v": np.zeros(2)}}, "t": 1}, ValueError,
     "state 'm' must be a real numeric array, got dtype <U1"),
    ({"state": {0: {"m": np.zeros(2), "v": object()}}, "t": 1}, ValueError, "state 'v' must be a real numeric array"),
    ({"state": {0: "m"}, "t": 1}, ValueError, "parameter 0: state must be a dict"),
    ({"state": {"zero": {}}, "t": 1}, ValueError, "state for parameter 'zero'"),
    ({"state": {}, "t": 1, "hyperparameters": {"momentum": 0.9}}, ValueError, r"unknown hyperparameters \['momentum'\]"),
    ({"state": {}, "t": 1, "hyperparameters": None}, ValueError, '"hyperparameters" must be a dict'),
    ({"state": {}}, ValueError, "t=None"),
])
def test_adam_load_state_dict_refuses_bad_input_and_changes_nothing(bad, error, message):
    params, opt = trained_adam()
    before = snapshot(opt)
    with pytest.raises(error, match=message):
        opt.load_state_dict(bad)
    assert_unchanged(opt, before)


def test_sgd_load_state_dict_refuses_a_string_array_and_changes_nothing():
    params = two_params()
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    for p in params:
        p.grad = ndl.Tensor(np.ones(p.shape, np.float32))
    opt.step()
    before = snapshot(opt)
    bad = {**opt.state_dict(), "state": {0: {"momentum_buffer": np.array(["1", "2"])}, 1: {"momentum_buffer": np.zeros((1, 1))}}}
    with pytest.raises(ValueError, match="state 'momentum_buffer' must be a real numeric array"):
        opt.load_state_dict(bad)
    assert_unchanged(opt, before)


def test_a_state_dict_keyed_by_strings_loads():
    """After a JSON round trip the parameter indices may be strings."""
    params, opt = trained_adam()
    saved = opt.state_dict()
    saved["state"] = {str(index): entry for index, entry in saved["state"].items()}
    fresh = optim.Adam(two_params(), lr=0.3)
    fresh.load_state_dict(saved)
    assert fresh.lr == 0.1 and fresh.t == 1
    np.testing.assert_array_equal(fresh.m[fresh.params[0]], opt.m[params[0]])


def test_clip_grad_norm_names_a_module_and_takes_one_parameter():
    with pytest.raises(TypeError, match=r"module Linear; pass model.parameters\(\)"):
        optim.clip_grad_norm(nn.Linear(2, 2), 1.0)
    w = nn.Parameter(ndl.Tensor([0.0, 0.0]))
    w.grad = ndl.Tensor([3.0, 4.0])
    assert optim.clip_grad_norm(w, 10.0) == 5.0


def test_a_state_dict_of_another_optimizer_type_is_refused_and_changes_nothing():
    params, adam = trained_adam()
    sgd = optim.SGD(params, lr=0.3, momentum=0.5)
    before = snapshot(sgd)
    with pytest.raises(ValueError, match=r"saved by Adam and this optimizer is SGD.*ndl.optim.Adam"):
        sgd.load_state_dict(adam.state_dict())
    assert_unchanged(sgd, before)
