"""Layer constructors refuse arguments that cannot make a layer, naming the layer and the argument."""
import numpy as np
import pytest

from needle import nn


@pytest.mark.parametrize(
    "make, error, pattern",
    [
        pytest.param(lambda: nn.Dropout("0.5"), TypeError, r"Dropout: p must be a number in \[0, 1\], got str '0.5'", id="dropout-str"),
        pytest.param(lambda: nn.Dropout(None), TypeError, r"Dropout: p .* got NoneType", id="dropout-none"),
        pytest.param(lambda: nn.Dropout(True), TypeError, r"Dropout: p .* got bool", id="dropout-bool"),
        pytest.param(lambda: nn.Dropout(1.5), ValueError, r"Dropout probability must be in \[0, 1\], got p=1.5", id="dropout-above-one"),
        pytest.param(lambda: nn.Dropout(-0.1), ValueError, r"got p=-0.1", id="dropout-negative"),
        pytest.param(lambda: nn.Dropout(float("nan")), ValueError, r"got p=nan", id="dropout-nan"),
        pytest.param(lambda: nn.Linear(0, 3), ValueError, r"Linear: in_features must be at least 1, got in_features=0", id="linear-zero"),
        pytest.param(lambda: nn.Linear(3, -4), ValueError, r"Linear: out_features must be at least 1, got out_features=-4", id="linear-negative"),
        pytest.param(lambda: nn.Linear("3", 4), TypeError, r"Linear: in_features must be a positive int, got str '3'", id="linear-str"),
        pytest.param(lambda: nn.Linear(3.0, 4), TypeError, r"Linear: in_features must be a positive int, got float 3.0", id="linear-float"),
        pytest.param(lambda: nn.Linear(3, 4, bias="yes"), TypeError, r"Linear: bias must be True or False, got str", id="linear-bias"),
        pytest.param(lambda: nn.Linear(3, 4, device="tpu"), ValueError, r"unknown device 'tpu'", id="linear-device"),
        pytest.param(lambda: nn.Linear(3, 4, dtype="float7"), TypeError, r"unknown dtype 'float7'", id="linear-dtype"),
        pytest.param(lambda: nn.Sequential([nn.ReLU(), nn.ReLU()]), TypeError, r"Sequential: argument 0 must be an nn.Module, got list \(unpack a list with nn.Sequential\(\*layers\)\)", id="sequential-list"),
        pytest.param(lambda: nn.Sequential(nn.ReLU(), 3), TypeError, r"Sequential: argument 1 must be an nn.Module, got int", id="sequential-int"),
        pytest.param(lambda: nn.LayerNorm1d(0), ValueError, r"LayerNorm1d: dim must be at least 1, got dim=0", id="layernorm-zero"),
        pytest.param(lambda: nn.LayerNorm1d("8"), TypeError, r"LayerNorm1d: dim must be a positive int, got str", id="layernorm-str"),
        pytest.param(lambda: nn.Residual(3), TypeError, r"Residual: fn must be an nn.Module, got int", id="residual-int"),
    ],
)
def test_bad_constructor_arguments_are_named(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_good_arguments_still_make_layers(device):
    assert nn.Linear(np.int64(3), 2, device=device.name).weight.shape == (3, 2)
    assert nn.Linear(3, 2, bias=False).bias is None
    assert nn.Dropout(np.float32(0.25)).p == 0.25
    assert nn.Dropout(1).p == 1.0
    assert len(nn.Sequential()) == 0


@pytest.mark.parametrize(
    "arguments, error, pattern",
    [
        pytest.param(dict(kernel_size=0), ValueError, r"Conv: kernel_size must be at least 1, got kernel_size=0", id="kernel-zero"),
        pytest.param(dict(kernel_size=-3), ValueError, r"Conv: kernel_size must be at least 1, got kernel_size=-3", id="kernel-negative"),
        pytest.param(dict(kernel_size=3.0), TypeError, r"Conv: kernel_size must be a positive int, got float 3.0", id="kernel-float"),
        pytest.param(dict(kernel_size=(0, 0)), ValueError, r"Conv: kernel_size must be at least 1", id="kernel-zero-pair"),
        pytest.param(dict(in_channels=0), ValueError, r"Conv: in_channels must be at least 1, got in_channels=0", id="in-zero"),
        pytest.param(dict(in_channels=3.0), TypeError, r"Conv: in_channels must be a positive int, got float", id="in-float"),
        pytest.param(dict(out_channels=-1), ValueError, r"Conv: out_channels must be at least 1, got out_channels=-1", id="out-negative"),
        pytest.param(dict(out_channels="8"), TypeError, r"Conv: out_channels must be a positive int, got str '8'", id="out-str"),
        pytest.param(dict(stride=0), ValueError, r"Conv: stride must be at least 1, got stride=0", id="stride-zero"),
        pytest.param(dict(stride=1.5), TypeError, r"Conv: stride must be a positive int, got float 1.5", id="stride-float"),
        pytest.param(dict(bias=None), TypeError, r"Conv: bias must be True or False, got NoneType", id="bias-none"),
    ],
)
def test_bad_conv_arguments_are_named_at_construction(arguments, error, pattern):
    given = dict(in_channels=3, out_channels=8, kernel_size=3) | arguments
    state_before = np.random.get_state()[1].copy()
    with pytest.raises(error, match=pattern):
        nn.Conv(**given)
    np.testing.assert_array_equal(np.random.get_state()[1], state_before)  # nothing was drawn


def test_good_conv_arguments_still_make_layers():
    assert nn.Conv(np.int64(3), 8, (3, 3), stride=np.int32(2)).weight.shape == (3, 3, 3, 8)
    assert nn.Conv(1, 1, 1, bias=False).bias is None
