"""DataLoader and MNISTDataset name a missing dataset or file instead of failing deep inside."""
import numpy as np
import pytest

from needle.data import DataLoader, MNISTDataset, NDArrayDataset


@pytest.mark.parametrize("dataset", [None, 3, object()])
def test_dataloader_without_a_dataset_names_the_argument(dataset):
    with pytest.raises(TypeError, match=r"DataLoader dataset must be a Dataset.*got dataset="):
        DataLoader(dataset, batch_size=2)


@pytest.mark.parametrize("argument", ["image_filename", "label_filename"])
def test_mnist_dataset_without_a_file_names_the_argument(argument, mnist_paths):
    paths = {"image_filename": mnist_paths.test_images, "label_filename": mnist_paths.test_labels, argument: None}
    with pytest.raises(TypeError, match=rf"MNISTDataset {argument} must be the path.*got {argument}=None"):
        MNISTDataset(**paths)


def shuffled_loader(samples=10, batch_size=3, drop_last=False):
    return DataLoader(NDArrayDataset(np.arange(samples, dtype=np.float32)), batch_size=batch_size, shuffle=True,
                      drop_last=drop_last)


def test_a_loader_resumes_an_epoch_at_its_next_batch_then_draws_new_orders():
    np.random.seed(3)
    loader = shuffled_loader()
    batches = iter(loader)
    seen = [next(batches)[0].numpy().tolist() for _ in range(2)]
    state = loader.state_dict()
    random_state = np.random.get_state()
    rest = [x.numpy().tolist() for (x,) in batches]
    next_epoch = [x.numpy().tolist() for (x,) in loader]

    np.random.set_state(random_state)
    resumed = shuffled_loader()
    resumed.load_state_dict(state)
    assert [x.numpy().tolist() for (x,) in resumed] == rest
    assert [x.numpy().tolist() for (x,) in resumed] == next_epoch
    assert sorted(sum(seen + rest, [])) == list(range(10))


@pytest.mark.parametrize("change, message", [
    ({"samples": 11}, "samples=11 in the state, 10 in this loader"),
    ({"batch_size": 4}, "batch_size=4 in the state, 3 in this loader"),
    ({"drop_last": True}, "drop_last=True"),
    ({"next_batch": 5}, r"next_batch must be an int in \[0, 4\]"),
    ({"order": np.zeros(10, np.int64)}, "order must be a permutation of the 10 sample indices"),
    ({"order": np.arange(10.0)}, "order must be a permutation"),
])
def test_a_state_that_does_not_fit_the_loader_is_refused_and_changes_nothing(change, message):
    loader = shuffled_loader()
    iter(loader)
    state = {**loader.state_dict(), **change}
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state)
    np.random.seed(0)
    expected = np.random.permutation(10)
    np.random.seed(0)
    assert np.concatenate([x.numpy() for (x,) in loader]).tolist() == expected.tolist()  # a fresh epoch
