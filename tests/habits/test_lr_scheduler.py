"""lr_scheduler against the formulas PyTorch documents, and against PyTorch where it is installed."""
import math

import numpy as np
import pytest

import needle as ndl
from needle.optim import lr_scheduler


def _optimizer(lr=0.1):
    return ndl.optim.SGD([ndl.nn.Parameter(ndl.init.ones(2))], lr=lr)


def _rates(scheduler, epochs):
    rates = []
    for _ in range(epochs):
        rates.append(scheduler.optimizer.lr)
        assert scheduler.get_last_lr() == [scheduler.optimizer.lr]
        scheduler.step()
    return rates


def test_step_lr_decays_every_step_size_epochs():
    rates = _rates(lr_scheduler.StepLR(_optimizer(0.1), step_size=3, gamma=0.5), 8)
    np.testing.assert_allclose(rates, [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025])


def test_cosine_annealing_reaches_eta_min_at_t_max():
    rates = _rates(lr_scheduler.CosineAnnealingLR(_optimizer(0.2), T_max=4, eta_min=0.01), 5)
    expected = [0.01 + 0.19 * (1 + math.cos(math.pi * epoch / 4)) / 2 for epoch in range(5)]
    np.testing.assert_allclose(rates, expected)
    assert rates[-1] == pytest.approx(0.01)


def test_lambda_lr_multiplies_the_base_rate():
    rates = _rates(lr_scheduler.LambdaLR(_optimizer(0.5), lambda epoch: 0.9**epoch), 4)
    np.testing.assert_allclose(rates, [0.5 * 0.9**epoch for epoch in range(4)])


@pytest.mark.parametrize(
    "make",
    [
        lambda opt, torch_module: (lr_scheduler.StepLR(opt, 2, 0.3), torch_module.StepLR),
        lambda opt, torch_module: (lr_scheduler.CosineAnnealingLR(opt, 5, 0.001), torch_module.CosineAnnealingLR),
    ],
)
def test_schedules_match_pytorch(make):
    torch = pytest.importorskip("torch")
    needle_schedule, torch_class = make(_optimizer(0.1), torch.optim.lr_scheduler)
    settings = [getattr(needle_schedule, name) for name in needle_schedule.hyperparameter_names]
    torch_opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    torch_schedule = torch_class(torch_opt, *settings)
    for _ in range(12):
        assert needle_schedule.get_last_lr()[0] == pytest.approx(torch_schedule.get_last_lr()[0], rel=1e-9, abs=1e-12)
        torch_opt.step()
        torch_schedule.step()
        needle_schedule.step()


def test_state_dict_resumes_the_schedule_exactly():
    first = lr_scheduler.StepLR(_optimizer(0.1), step_size=2, gamma=0.5)
    for _ in range(3):
        first.step()
    resumed = lr_scheduler.StepLR(_optimizer(0.1), step_size=5, gamma=0.9)
    resumed.load_state_dict(first.state_dict())
    assert resumed.optimizer.lr == first.optimizer.lr and resumed.last_epoch == 3
    assert _rates(resumed, 4) == _rates(first, 4)


@pytest.mark.parametrize(
    "state, words",
    [
        ("x", "needs the dict"),
        ({"scheduler": "CosineAnnealingLR", "last_epoch": 1, "base_lr": 0.1, "T_max": 3, "eta_min": 0}, "saved by"),
        ({"last_epoch": 1, "base_lr": 0.1, "step_size": 2}, "lacks"),
        ({"last_epoch": -2, "base_lr": 0.1, "step_size": 2, "gamma": 0.5}, "last_epoch"),
        ({"last_epoch": 1, "base_lr": 0.1, "step_size": 0, "gamma": 0.5}, "step_size"),
    ],
)
def test_a_bad_state_changes_nothing(state, words):
    schedule = lr_scheduler.StepLR(_optimizer(0.1), step_size=2, gamma=0.5)
    schedule.step()
    before = schedule.state_dict(), schedule.optimizer.lr
    with pytest.raises((TypeError, ValueError), match=words):
        schedule.load_state_dict(state)
    assert (schedule.state_dict(), schedule.optimizer.lr) == before


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda opt: lr_scheduler.StepLR(opt, 0), "step_size"),
        (lambda opt: lr_scheduler.StepLR(opt, 2.5), "step_size"),
        (lambda opt: lr_scheduler.StepLR(opt, 2, gamma=-1), "gamma"),
        (lambda opt: lr_scheduler.CosineAnnealingLR(opt, 0), "T_max"),
        (lambda opt: lr_scheduler.CosineAnnealingLR(opt, 3, eta_min=float("nan")), "eta_min"),
        (lambda opt: lr_scheduler.LambdaLR(opt, 0.5), "lr_lambda"),
        (lambda opt: lr_scheduler.LambdaLR(opt, lambda epoch: -1.0), "lr_lambda"),
        (lambda opt: lr_scheduler.StepLR(opt, 2, last_epoch=4), "load_state_dict"),
        (lambda opt: lr_scheduler.StepLR(object(), 2), "optimizer"),
    ],
)
def test_bad_arguments_are_named_and_leave_the_rate_alone(make, words):
    opt = _optimizer(0.1)
    with pytest.raises((TypeError, ValueError), match=words):
        make(opt)
    assert opt.lr == 0.1
