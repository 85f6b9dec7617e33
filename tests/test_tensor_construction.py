"""Tensor construction: what is copied and what is shared, which data is refused, keywords, devices, repr, len."""
import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import as_device


# ---- copies and sharing ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, "float32"], ids=["no-dtype", "same-dtype"])
def test_tensor_of_a_tensor_is_a_snapshot_after_an_optimizer_step(dtype, device):
    p = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0], device=device))
    snapshot = ndl.Tensor(p, dtype=dtype)
    p.grad = ndl.Tensor([1.0, 1.0], device=device)
    ndl.optim.SGD([p], lr=0.5).step()
    np.testing.assert_allclose(p.numpy(), [0.5, 1.5])
    np.testing.assert_allclose(snapshot.numpy(), [1.0, 2.0])


def test_tensor_of_a_tensor_copies_and_detach_shares(device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    copy, shared = ndl.Tensor(t), t.detach()
    t.realize_cached_data().raw[0] = 9.0  # an in-place write, as an optimizer does
    assert copy.numpy().tolist() == [1.0, 2.0]
    assert shared.numpy().tolist() == [9.0, 2.0]
    assert copy.device is t.device and copy.dtype == t.dtype and copy.op is None


def test_tensor_of_a_tensor_with_another_dtype_or_device_converts(device):
    t = ndl.Tensor([1.5, 2.5], device=device)
    wide = ndl.Tensor(t, dtype="float64")
    assert wide.dtype == np.float64 and wide.numpy().tolist() == [1.5, 2.5]
    moved = ndl.Tensor(t, device=ndl.cpu())
    assert moved.device is ndl.cpu() and moved.numpy().tolist() == [1.5, 2.5]
    moved.realize_cached_data().raw[0] = 0.0
    assert t.numpy().tolist() == [1.5, 2.5]


def test_tensor_of_a_numpy_array_copies_and_of_an_ndarray_shares():
    host = np.array([1.0, 2.0], dtype=np.float32)
    copied = ndl.Tensor(host)
    shared = ndl.Tensor(ndl.NDArray(host))  # wrapping an NDArray shares on purpose
    host[0] = 7.0
    assert copied.numpy().tolist() == [1.0, 2.0]
    assert shared.numpy().tolist() == [7.0, 2.0]


def test_tensor_of_an_unrealized_lazy_tensor_copies_its_value(lazy_mode):
    x = ndl.Tensor([1.0, 2.0])
    y = x * 2
    assert ndl.Tensor(y).numpy().tolist() == [2.0, 4.0]


# ---- refused data ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, dtype_named",
    [
        pytest.param(np.array([1 + 2j]), "complex128", id="complex"),
        pytest.param(np.array([1, "a"], dtype=object), "object", id="object-array"),
        pytest.param(np.array(["1", "2"]), "<U1", id="string-array"),
        pytest.param(["1", "2"], "<U1", id="list-of-strings"),
        pytest.param([b"1"], "|S1", id="list-of-bytes"),
        pytest.param([1, None], "object", id="none-in-list"),
        pytest.param(np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64[D]", id="datetime"),
        pytest.param(np.array([1], dtype="timedelta64[s]"), "timedelta64[s]", id="timedelta"),
        pytest.param(np.zeros(2, dtype=[("a", "f4")]), "('a', '<f4')", id="structured"),
        pytest.param(1 + 2j, "complex128", id="complex-scalar"),
        pytest.param(np.complex64(1), "complex64", id="numpy-complex-scalar"),
    ],
)
def test_non_numeric_data_is_refused_naming_the_dtype(data, dtype_named):
    with pytest.raises(TypeError, match=r"Tensor needs numbers: got dtype") as caught:
        ndl.Tensor(data)
    assert dtype_named in str(caught.value)


@pytest.mark.parametrize("dtype", ["complex64", "object", "str", "datetime64[s]"])
def test_a_non_numeric_dtype_argument_is_refused(dtype):
    with pytest.raises(TypeError, match="Tensor needs numbers: got dtype .* from dtype="):
        ndl.Tensor([1.0], dtype=dtype)
    with pytest.raises(TypeError, match="from dtype="):
        ndl.Tensor(ndl.Tensor([1.0]), dtype=dtype)


def test_ragged_lists_are_refused_saying_why():
    with pytest.raises(TypeError, match=r"could not make an array from list \[\[1, 2\], \[3\]\].*different lengths"):
        ndl.Tensor([[1, 2], [3]])


def test_complex_data_no_longer_gives_a_complex_gradient():
    # the case: x**2 of complex data had gradient 2+4j; now construction refuses it
    with pytest.raises(TypeError, match="complex128"):
        ndl.Tensor(np.array([1 + 2j]))


def test_assigning_strings_to_data_is_refused_and_the_tensor_is_unchanged():
    t = ndl.Tensor([1.0])
    with pytest.raises(TypeError, match="<U1"):
        t.data = ["x"]
    assert t.numpy().tolist() == [1.0]


@pytest.mark.parametrize(
    "data, dtype",
    [([True, False], np.float32), (np.array([True]), np.bool_), (np.array([1], dtype=np.uint8), np.uint8), (3, np.float32)],
)
@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_real_numbers_and_booleans_are_accepted(data, dtype):
    assert ndl.Tensor(data).dtype == dtype


def test_a_scalar_too_large_for_the_dtype_names_the_op_and_the_fix():
    t = ndl.Tensor(np.array([1]))
    with pytest.raises(OverflowError, match=r"AddScalar: the number 1180591620717411303424 does not fit .*int64.*dtype='float64'"):
        t + 2**70
    with pytest.raises(OverflowError, match=r"MulScalar: .*int64"):
        t * 2**70
    assert t.numpy().tolist() == [1]


# ---- keywords ---------------------------------------------------------------------------------------
def test_a_misspelled_keyword_is_refused_by_name():
    with pytest.raises(TypeError, match="require_grad"):
        ndl.Tensor([1.0], require_grad=False)
    with pytest.raises(TypeError, match="devcie"):
        ndl.Tensor([1.0], devcie="cpu")


@pytest.mark.parametrize("value", ["False", 0, None, 1.0])
def test_requires_grad_must_be_a_bool(value):
    with pytest.raises(TypeError, match="requires_grad must be True or False"):
        ndl.Tensor([1.0], requires_grad=value)


def test_requires_grad_accepts_numpy_bools():
    assert ndl.Tensor([1.0], requires_grad=np.bool_(False)).requires_grad is False


# ---- devices by name ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cpu", "CPU", " cpu "])
def test_device_names_resolve_to_the_cpu(name):
    assert as_device(name) is ndl.cpu()
    assert ndl.Tensor([1.0], device=name).device is ndl.cpu()
    assert ndl.init.zeros(2, device=name).device is ndl.cpu()
    assert ndl.init.one_hot(3, ndl.Tensor([1], dtype="int64"), device=name).device is ndl.cpu()


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_names_resolve_to_the_cuda_device(name):
    assert as_device(name) is ndl.cuda()


def test_as_device_passes_devices_and_none_through():
    assert as_device(None) is ndl.default_device()
    assert as_device(ndl.cpu()) is ndl.cpu()


@pytest.mark.parametrize("spec, error", [("tpu", ValueError), ("cuda:1", ValueError), (0, TypeError), (["cpu"], TypeError)])
def test_unknown_devices_are_named(spec, error):
    with pytest.raises(error, match="device"):
        as_device(spec)
    with pytest.raises(error, match=repr(spec).replace("[", r"\[").replace("]", r"\]")):
        ndl.Tensor([1.0], device=spec)


def test_tensor_to_a_device_name(device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    assert t.to(device.name) is t
    on_cpu = t.to("cpu")
    assert on_cpu.device is ndl.cpu() and on_cpu.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        t.to("gpu0")


def test_tensor_to_cuda_by_name(cuda_device):
    t = ndl.Tensor([1.0, 2.0]).to("cuda:0")
    assert t.device is cuda_device and t.numpy().tolist() == [1.0, 2.0]


# ---- len, repr ------------------------------------------------------------------------------------------
def test_len_of_a_0d_tensor_is_a_type_error_as_in_numpy():
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(ndl.Tensor(np.float32(1.0)))
    assert len(ndl.Tensor([[1.0, 2.0]])) == 1


def test_repr_names_the_producing_op_and_leaves_stay_plain():
    x = ndl.Tensor([1.0])
    y = x * ndl.Tensor([3.0])
    assert repr(x) == "needle.Tensor([1.])"
    assert repr(y) == "needle.Tensor([3.], op=EWiseMul)"
    assert repr(y.detach()) == "needle.Tensor([3.])"
    with ndl.no_grad():
        assert repr(x * 3) == "needle.Tensor([3.])"


def test_repr_of_the_lecture_graph():
    v1 = ndl.Tensor([0])
    v2 = ndl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    assert repr(v4.inputs) == "(needle.Tensor([1.], op=Exp), needle.Tensor([2.], op=AddScalar))"
    assert repr(v4) == "needle.Tensor([2.], op=EWiseMul)"


def test_repr_of_a_tensor_tuple_names_its_op_once():
    a = ndl.Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert repr(ndl.ops.split(a, 0)) == "needle.TensorTuple(needle.Tensor([1. 2.]), needle.Tensor([3. 4.]), op=Split)"
    with ndl.no_grad():
        assert repr(ndl.ops.make_tuple(a)) == "needle.TensorTuple(needle.Tensor([[1. 2.]\n [3. 4.]]))"


def test_repr_stays_short_for_large_tensors():
    assert len(repr(ndl.Tensor(np.zeros((100, 100)))).splitlines()) < 10


def test_repr_names_a_gpu_device(cuda_device):
    assert repr(ndl.Tensor([1.0], device=cuda_device)) == "needle.Tensor([1.], device=cuda())"


# ---- reshape and transpose spellings ----------------------------------------------------------------------
def test_reshape_takes_a_tuple_an_int_or_several_ints(device):
    t = ndl.Tensor(np.arange(6.0).reshape(2, 3), device=device)
    assert t.reshape(6).shape == (6,)
    assert t.reshape(3, 2).shape == (3, 2)
    assert t.reshape((3, -1)).shape == (3, 2)
    assert t.reshape([1, 6]).shape == (1, 6)
    np.testing.assert_array_equal(t.reshape(3, 2).numpy(), np.arange(6.0).reshape(3, 2))
    with pytest.raises(TypeError, match=r"Tensor.reshape\(\) needs a shape"):
        t.reshape()


def test_transpose_takes_a_pair_or_two_ints(device):
    t = ndl.Tensor(np.zeros((2, 3, 4)), device=device)
    assert t.transpose().shape == (2, 4, 3)
    assert t.transpose((0, 2)).shape == (4, 3, 2)
    assert t.transpose(0, 1).shape == (3, 2, 4)
    assert t.transpose(-1, 0).shape == (4, 3, 2)


def test_dataloader_and_trainer_resolve_device_names_the_same_way():
    from trainers import Trainer

    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(np.ones((4, 2), dtype=np.float32)), batch_size=2, device="CPU")
    (batch,) = next(iter(loader))
    assert batch.device is ndl.cpu()
    model = ndl.nn.Linear(2, 2)
    trainer = Trainer(model, ndl.optim.SGD(model.parameters()), device="cpu", monitor=False, progress=False)
    assert trainer.device is ndl.cpu()
    for make in (lambda: ndl.data.DataLoader(loader.dataset, device="cuda:3"), lambda: Trainer(model, ndl.optim.SGD(model.parameters()), device="cuda:3", monitor=False, progress=False)):
        with pytest.raises(ValueError, match="unknown device 'cuda:3'"):
            make()


def test_ndarray_level_constructors_take_device_names():
    from needle.backend_ndarray import NDArray, array, full

    assert NDArray([1.0], device="cpu").device is ndl.cpu()
    assert NDArray([1.0]).to("cpu").device is ndl.cpu()
    assert full((2,), 1.0, device="cpu").device is ndl.cpu()
    assert array(np.ones(2), device="CPU").device is ndl.cpu()
    assert array(np.ones(2)).device is ndl.cpu()  # numpy 2's ndarray.device ("cpu") is not mistaken for a needle device
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        NDArray([1.0], device="tpu")
