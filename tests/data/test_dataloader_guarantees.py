"""DataLoader guarantees that nothing else pins down: batches cannot write into the dataset, the
device copy of an array dataset is made once, and ``load_state_dict`` takes every valid state
(``next_batch=0`` included) and refuses the rest by name, changing nothing."""
import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray.device import Device
from needle.data import DataLoader, NDArrayDataset


class CountingArraysDataset(NDArrayDataset):
    """An array dataset that counts how often its whole arrays are asked for."""

    def __init__(self, *arrays):
        super().__init__(*arrays)
        self.as_arrays_calls = 0

    def as_arrays(self):
        self.as_arrays_calls += 1
        return super().as_arrays()


class CopyCountingDevice(Device):
    """A second host device (numpy arrays) that records the shape and dtype of every array it makes."""

    __slots__ = ("made",)

    def array(self, obj, dtype=None):
        self.made.append((np.shape(obj), np.asarray(obj).dtype if dtype is None else np.dtype(dtype)))
        return super().array(obj, dtype)


def pairs_dataset(count=6):
    x = np.arange(2 * count, dtype=np.float32).reshape(count, 2)
    return CountingArraysDataset(x, np.arange(count, dtype=np.uint8))


def epoch(loader):
    return [tuple(part.numpy().copy() for part in batch) for batch in loader]


# ---- batches are read-only views ------------------------------------------------------------------
def test_a_batch_cannot_be_written_into_and_the_dataset_stays_as_it_was():
    dataset = pairs_dataset()
    originals = [array.copy() for array in dataset.as_arrays()]
    x, y = next(iter(DataLoader(dataset, batch_size=4)))
    assert np.shares_memory(x.numpy(), dataset.as_arrays()[0]), "an unshuffled CPU batch is a view, not a copy"
    for part in (x.numpy(), y.numpy()):
        assert not part.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            part[0] = 99
    for now, then in zip(dataset.as_arrays(), originals):
        np.testing.assert_array_equal(now, then)
    assert dataset.as_arrays()[0].flags.writeable, "the user's own array keeps its flag"


def test_editing_a_shuffled_batch_leaves_the_dataset_and_the_next_epoch_alone():
    dataset = pairs_dataset()
    loader = DataLoader(dataset, batch_size=4, shuffle=True)
    np.random.seed(0)
    for x, _ in loader:
        if x.numpy().flags.writeable:  # a gathered copy may be writable: it is the batch's own
            x.numpy()[...] = -1
    np.testing.assert_array_equal(dataset.as_arrays()[0], np.arange(12, dtype=np.float32).reshape(6, 2))
    assert all(np.all(x >= 0) for x, _ in epoch(loader))


# ---- the resident copy is made once -----------------------------------------------------------------
def test_the_whole_arrays_are_read_and_cast_once_on_the_cpu():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)  # float64: cast to float32 once
    dataset = CountingArraysDataset(x, np.arange(6, dtype=np.uint8))
    loader = DataLoader(dataset, batch_size=4, shuffle=True)
    for _ in range(3):
        np.testing.assert_array_equal(np.sort(np.concatenate([b[0].numpy() for b in loader]), axis=0),
                                      x.astype(np.float32))
    assert dataset.as_arrays_calls == 1
    unshuffled = DataLoader(dataset, batch_size=6)
    views = [next(iter(unshuffled))[0].numpy() for _ in range(3)]
    assert all(np.shares_memory(views[0], view) for view in views[1:]), "each epoch must reuse one cast copy"
    assert views[0].dtype == np.float32


def test_the_device_copy_is_made_once_for_every_epoch():
    device = CopyCountingDevice("counting", np)
    device.made = []
    dataset = pairs_dataset(6)
    loader = DataLoader(dataset, batch_size=4, shuffle=True, device=device)
    np.random.seed(2)
    orders = []
    for _ in range(3):
        labels = np.concatenate([y.numpy() for _, y in loader])
        orders.append(labels)
        assert sorted(labels.tolist()) == list(range(6))
    whole_inputs = [made for made in device.made if made == ((6, 2), np.float32)]
    whole_labels = [made for made in device.made if made == ((6,), np.uint8)]
    assert len(whole_inputs) == 1 and len(whole_labels) == 1, device.made
    uploads_of_orders = [made for made in device.made if made == ((6,), np.int64)]
    assert len(uploads_of_orders) == 3, "one small index upload per epoch"
    assert dataset.as_arrays_calls == 1
    np.random.seed(2)
    for labels in orders:
        np.testing.assert_array_equal(labels, np.random.permutation(6))


def test_another_device_gets_its_own_copy():
    dataset = pairs_dataset(6)
    first, second = CopyCountingDevice("first", np), CopyCountingDevice("second", np)
    first.made, second.made = [], []
    loader = DataLoader(dataset, batch_size=4)
    for device in (first, second, first):
        loader.device = device
        x, _ = next(iter(loader))
        assert x.device is device
    assert first.made.count(((6, 2), np.float32)) == 2 and second.made.count(((6, 2), np.float32)) == 1


def test_a_collate_fn_never_reads_the_whole_arrays():
    dataset = pairs_dataset(6)
    batches = list(DataLoader(dataset, batch_size=4, collate_fn=lambda samples: len(samples)))
    assert batches == [4, 2] and dataset.as_arrays_calls == 0


# ---- state_dict / load_state_dict -------------------------------------------------------------------
def shuffled(samples=10, batch_size=3, drop_last=False):
    return DataLoader(NDArrayDataset(np.arange(samples, dtype=np.float32)), batch_size=batch_size,
                      shuffle=True, drop_last=drop_last)


def values(loader):
    return [x.numpy().tolist() for (x,) in loader]


def test_a_state_taken_before_the_first_batch_loads_and_replays_the_whole_epoch():
    np.random.seed(4)
    loader = shuffled()
    batches = iter(loader)
    state = loader.state_dict()
    assert state["next_batch"] == 0 and state["samples"] == 10 and state["batch_size"] == 3
    whole = [x.numpy().tolist() for (x,) in batches]
    resumed = shuffled()
    resumed.load_state_dict(state)
    assert values(resumed) == whole and len(whole) == 4


def test_a_state_at_the_end_of_an_epoch_loads_and_yields_nothing_then_a_new_epoch():
    np.random.seed(4)
    loader = shuffled(drop_last=True)
    values(loader)
    state = loader.state_dict()
    assert state["next_batch"] == 3 and state["drop_last"] is True
    resumed = shuffled(drop_last=True)
    resumed.load_state_dict(state)
    assert values(resumed) == []
    assert len(values(resumed)) == 3


def test_an_unshuffled_state_has_no_order_and_resumes_in_dataset_order():
    loader = DataLoader(NDArrayDataset(np.arange(7, dtype=np.float32)), batch_size=3)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    assert state["order"] is None and state["next_batch"] == 1
    resumed = DataLoader(NDArrayDataset(np.arange(7, dtype=np.float32)), batch_size=3)
    resumed.load_state_dict(state)
    assert values(resumed) == [[3.0, 4.0, 5.0], [6.0]]
    assert values(resumed) == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0]]


def test_the_saved_order_is_a_copy_either_way():
    np.random.seed(5)
    loader = shuffled()
    batches = iter(loader)
    state = loader.state_dict()
    assert state["order"].dtype == np.int64
    saved = state["order"].copy()
    state["order"][:] = np.arange(10)  # editing the state does not reorder the running epoch
    assert np.concatenate([x.numpy() for (x,) in batches]).tolist() == saved.tolist()
    resumed = shuffled()
    order = saved.astype(np.int32)  # any integer dtype loads
    resumed.load_state_dict({**state, "order": order})
    order[:] = 0  # nor does editing it after the load
    assert np.concatenate([x.numpy() for (x,) in resumed]).tolist() == saved.tolist()


@pytest.mark.parametrize("next_batch", ["1", 1.0, True, None, -1, 5, np.float64(2.0)])
def test_a_bad_next_batch_is_refused_by_name_and_changes_nothing(next_batch):
    np.random.seed(0)
    loader = shuffled()
    iter(loader)
    state = {**loader.state_dict(), "next_batch": next_batch}
    with pytest.raises(ValueError) as caught:
        loader.load_state_dict(state)
    assert str(caught.value) == (
        "DataLoader.load_state_dict: the state does not fit this loader, nothing was loaded:\n  "
        f"next_batch must be an int in [0, 4], got {next_batch!r}\n"
        "(resume with a DataLoader over the same dataset, batch_size and drop_last)"
    )
    np.random.seed(1)
    expected = np.random.permutation(10)
    np.random.seed(1)
    assert np.concatenate([x.numpy() for (x,) in loader]).tolist() == expected.tolist()  # a fresh epoch


def test_a_numpy_integer_next_batch_loads():
    np.random.seed(0)
    loader = shuffled()
    batches = iter(loader)
    next(batches)
    state = {**loader.state_dict(), "next_batch": np.int64(1)}
    rest = [x.numpy().tolist() for (x,) in batches]
    resumed = shuffled()
    resumed.load_state_dict(state)
    assert values(resumed) == rest


@pytest.mark.parametrize("state", [None, [("next_batch", 0)], "state"])
def test_a_state_that_is_not_a_dict_is_refused_by_type(state):
    loader = shuffled()
    with pytest.raises(TypeError) as caught:
        loader.load_state_dict(state)
    assert str(caught.value) == (
        f"DataLoader.load_state_dict needs the dict that state_dict() returned; got {type(state).__name__}"
    )


def test_every_problem_is_named_at_once_and_a_pending_resume_is_kept():
    np.random.seed(0)
    loader = shuffled()
    batches = iter(loader)
    next(batches)
    good = loader.state_dict()
    rest = [x.numpy().tolist() for (x,) in batches]
    resumed = shuffled()
    resumed.load_state_dict(good)
    with pytest.raises(ValueError) as caught:
        resumed.load_state_dict({"order": np.arange(3)})
    assert str(caught.value) == (
        "DataLoader.load_state_dict: the state does not fit this loader, nothing was loaded:\n  "
        "samples=None in the state, 10 in this loader\n  "
        "batch_size=None in the state, 3 in this loader\n  "
        "drop_last=None in the state, False in this loader\n  "
        "next_batch must be an int in [0, 4], got None\n  "
        "order must be a permutation of the 10 sample indices\n"
        "(resume with a DataLoader over the same dataset, batch_size and drop_last)"
    )
    assert values(resumed) == rest, "the refused load undid the resume loaded before it"


@pytest.mark.parametrize("order", [np.arange(10).reshape(2, 5), np.arange(9), np.arange(1, 11), np.arange(10) * 1.0,
                                   np.array([True] * 10)])
def test_an_order_that_is_not_a_permutation_is_refused(order):
    loader = shuffled()
    iter(loader)
    with pytest.raises(ValueError, match=r"\n  order must be a permutation of the 10 sample indices\n"):
        loader.load_state_dict({**loader.state_dict(), "order": order})


def test_the_state_names_the_settings_it_fits():
    loader = DataLoader(NDArrayDataset(np.arange(5, dtype=np.float32)), batch_size=2, drop_last=1)
    state = loader.state_dict()
    assert state == {"order": None, "next_batch": 0, "samples": 5, "batch_size": 2, "drop_last": True}
    assert type(state["drop_last"]) is bool
    ndl.data.DataLoader(NDArrayDataset(np.arange(5, dtype=np.float32)), batch_size=2, drop_last=True).load_state_dict(state)


# ---- the three ways to fetch a batch, and the defaults ----------------------------------------------
class BareArrayDataset(ndl.data.Dataset):
    """Items are bare arrays, not tuples, fetched one by one."""

    def __len__(self):
        return 5

    def __getitem__(self, index):
        return np.full(3, index, dtype=np.float64)


def test_the_defaults_are_one_sample_a_batch_in_order():
    loader = DataLoader(pairs_dataset(3))
    assert loader.batch_size == 1 and len(loader) == 3 and not loader.shuffle and not loader.drop_last
    assert [y.numpy().tolist() for _, y in loader] == [[0], [1], [2]]


def test_bare_array_items_make_one_tensor_batches():
    (x,), (rest,) = list(DataLoader(BareArrayDataset(), batch_size=3))
    np.testing.assert_array_equal(x.numpy(), [[0.0] * 3, [1.0] * 3, [2.0] * 3])
    assert x.numpy().dtype == np.float32 and rest.shape == (2, 3)


def test_a_plain_list_of_pairs_is_a_dataset():
    samples = [(np.full(2, i, np.float32), np.int64(i)) for i in range(5)]
    x, y = next(iter(DataLoader(samples, batch_size=4)))
    np.testing.assert_array_equal(y.numpy(), [0, 1, 2, 3])
    np.testing.assert_array_equal(x.numpy()[:, 0], [0, 1, 2, 3])


class LengthOnly:
    def __len__(self):
        return 3


class ItemsOnly:
    def __getitem__(self, index):
        return index


@pytest.mark.parametrize("dataset", [LengthOnly(), ItemsOnly()], ids=["no __getitem__", "no __len__"])
def test_a_dataset_needs_both_len_and_getitem(dataset):
    with pytest.raises(TypeError, match=r"DataLoader dataset must be a Dataset \(anything with __len__ and __getitem__"):
        DataLoader(dataset)


def test_per_sample_batches_are_placed_on_the_loaders_device():
    device = CopyCountingDevice("counting", np)
    device.made = []
    (x,), _ = list(DataLoader(BareArrayDataset(), batch_size=3, device=device))
    assert x.device is device and x.realize_cached_data().device is device
    np.testing.assert_array_equal(x.numpy()[:, 0], [0.0, 1.0, 2.0])
    assert ((3, 3), np.float32) in device.made


def test_on_the_cpu_nothing_is_uploaded(monkeypatch):
    made = []
    real = Device.array

    def counting(self, obj, dtype=None):
        made.append((self.name, np.shape(obj)))
        return real(self, obj, dtype)

    monkeypatch.setattr(Device, "array", counting)
    np.random.seed(0)
    list(DataLoader(pairs_dataset(6), batch_size=4, shuffle=True))
    list(DataLoader(BareArrayDataset(), batch_size=5))
    # the loader wraps batches without Device.array: no upload of the order (6,), no batch of the
    # resident arrays or of fetched items copied
    assert made == [], made


def test_an_unshuffled_batch_on_a_device_is_a_view_of_its_resident_copy():
    device = CopyCountingDevice("counting", np)
    device.made = []
    dataset = pairs_dataset(6)
    x, y = next(iter(DataLoader(dataset, batch_size=4, device=device)))
    assert x.realize_cached_data().device is device
    assert np.shares_memory(x.numpy(), dataset.as_arrays()[0]), "a host device's copy is the array itself"


# ---- errors that name the option ---------------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [True, 2.5, "2", -1])
def test_a_num_workers_that_is_no_count_is_named(num_workers):
    with pytest.raises(ValueError) as caught:
        DataLoader(pairs_dataset(), num_workers=num_workers)
    assert str(caught.value) == f"DataLoader num_workers must be a non-negative int; got num_workers={num_workers!r}"


def test_pin_memory_and_persistent_workers_are_refused_with_the_reason():
    with pytest.raises(ValueError) as caught:
        DataLoader(pairs_dataset(), pin_memory=True)
    assert str(caught.value) == (
        "DataLoader pin_memory=True: needle has no pinned staging memory. Array datasets are "
        "copied to the device once, at the first iteration, not once per batch, so there is no "
        "per-batch host-to-device copy to speed up. Fix: drop pin_memory (or pass pin_memory=False)."
    )
    with pytest.raises(ValueError) as caught:
        DataLoader(pairs_dataset(), persistent_workers=True)
    assert str(caught.value) == (
        "DataLoader persistent_workers=True: needle uses no worker processes (see num_workers), "
        "so there are none to keep alive between epochs. Fix: drop persistent_workers."
    )


class DisabledDevice(Device):
    """A device whose array module loads but which reports itself disabled."""

    __slots__ = ()

    def enabled(self):
        return False


def test_an_unavailable_device_is_named_with_the_reason():
    with pytest.raises(RuntimeError) as caught:
        DataLoader(pairs_dataset(), device=DisabledDevice("sleepy", np))
    assert str(caught.value) == (
        "DataLoader device 'sleepy' is not available on this machine (it reports itself disabled); "
        "pass device=needle.cpu() to load batches on the CPU"
    )
    missing = Device("absent", None, unavailable_reason="no driver for it")
    with pytest.raises(RuntimeError) as caught:
        DataLoader(pairs_dataset(), device=missing)
    message = str(caught.value)
    assert message.startswith("DataLoader device 'absent' is not available on this machine (device absent() is not available: no driver for it")
    assert message.endswith("); pass device=needle.cpu() to load batches on the CPU")
