"""The CNN and LSTM examples take MNISTDataset batches in both layouts: flat rows (the course's default) and images."""
import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, MNISTDataset, mnist
from example_scripts import load_example


@pytest.fixture(scope="module")
def both_layouts():
    files = mnist()
    flat = MNISTDataset(files.test_images, files.test_labels)
    images = MNISTDataset(files.test_images, files.test_labels, flat=False)
    flat_batch, labels = next(iter(DataLoader(flat, batch_size=4)))
    image_batch, image_labels = next(iter(DataLoader(images, batch_size=4)))
    np.testing.assert_array_equal(labels.numpy(), image_labels.numpy())
    return flat_batch, image_batch


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: load_example("mnist_models").cnn(), id="cnn"),
        pytest.param(lambda: load_example("mnist_lstm").SequentialMNISTLSTM(hidden_size=8), id="lstm"),
    ],
)
def test_models_give_the_same_logits_for_either_layout(both_layouts, make):
    flat_batch, image_batch = both_layouts
    assert flat_batch.shape == (4, 784) and image_batch.shape == (4, 28, 28, 1)
    np.random.seed(0)
    model = make()
    model.eval()
    with ndl.no_grad():
        from_rows, from_images = model(flat_batch).numpy(), model(image_batch).numpy()
    assert from_rows.shape == (4, 10)
    np.testing.assert_array_equal(from_rows, from_images)
