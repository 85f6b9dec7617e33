import gzip

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.data import DataLoader, MNISTDataset, MNISTFormatError, parse_mnist


def test_train_set_shapes_dtypes_and_labels(train_set):
    assert len(train_set) == 60000
    assert train_set.images.shape == (60000, 784) and train_set.images.dtype == np.float32
    assert train_set.labels.dtype == np.uint8
    np.testing.assert_array_equal(train_set.labels[:5], [5, 0, 4, 1, 9])
    image, label = train_set[0]
    assert image.shape == (784,) and image.dtype == np.float32  # the course's flat row
    assert label == 5


def test_values_are_pixels_over_255(train_set):
    images = train_set.images
    assert images.min() == 0.0 and images.max() == 1.0
    scaled = images[:500] * 255.0
    np.testing.assert_allclose(scaled, np.round(scaled), atol=1e-4)  # not min-max scaled
    # per-image maxima below 1 exist only without min-max scaling
    assert (images[:500].max(axis=1) < 1.0).any()


def test_test_set(test_set):
    assert len(test_set) == 10000
    np.testing.assert_array_equal(test_set.labels[:3], [7, 2, 1])


def test_batch_indexing_gives_flat_rows(test_set):
    batch, labels = test_set[np.array([3, 1, 3])]
    assert batch.shape == (3, 784) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch[1], test_set.images[1])
    np.testing.assert_array_equal(labels, test_set.labels[[3, 1, 3]])
    sliced, sliced_labels = test_set[10:14]
    assert sliced.shape == (4, 784) and np.shares_memory(sliced, test_set.images)
    np.testing.assert_array_equal(sliced_labels, test_set.labels[10:14])
    images, labels = test_set.as_arrays()
    assert images.shape == (10000, 784) and labels is test_set.labels


def test_image_shaped_items_are_one_reshape(mnist_paths, test_set):
    images = MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels, flat=False)
    image, label = images[1]
    assert image.shape == (28, 28, 1) and label == test_set.labels[1]
    np.testing.assert_array_equal(image, test_set.images[1].reshape(28, 28, 1))
    batch, _ = images[np.array([3, 1, 3])]
    assert batch.shape == (3, 28, 28, 1)
    np.testing.assert_array_equal(batch[1], test_set.images[1].reshape(28, 28, 1))
    sliced, _ = images[10:14]
    assert sliced.shape == (4, 28, 28, 1) and np.shares_memory(sliced, images.images)
    assert images.as_arrays()[0].shape == (10000, 28, 28, 1)


def test_flat_must_be_a_bool(mnist_paths):
    with pytest.raises(TypeError, match=r"MNISTDataset flat must be True .* or False .*got flat='no'"):
        MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels, flat="no")


def test_a_course_style_epoch_feeds_batches_straight_into_linear(mnist_paths):
    """The course's hw2 ``epoch`` passes each batch to ``Linear(784, ...)`` without reshaping."""

    np.random.seed(0)
    dataset = MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels)
    model = nn.Sequential(nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for X, y in DataLoader(dataset, batch_size=500):
        loss = nn.SoftmaxLoss()(model(X), y)
        opt.reset_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    assert len(losses) == 20 and losses[-1] < losses[0]


def test_parse_mnist_fake_files(fake_pair):
    images, labels, pixels = fake_pair
    X, y = parse_mnist(images, labels)
    assert X.shape == (3, 784) and X.dtype == np.float32
    np.testing.assert_array_equal(X, (pixels.reshape(3, 784) / 255.0).astype(np.float32))
    np.testing.assert_array_equal(y, [7, 3, 9])
    assert y.dtype == np.uint8


def test_errors_are_value_errors():
    assert issubclass(MNISTFormatError, ValueError)


def test_wrong_magic_number(write_idx, fake_pair):
    images, labels, _ = fake_pair
    bad = write_idx("bad-images.gz", 1234, (3, 28, 28), bytes(3 * 784))
    with pytest.raises(MNISTFormatError, match=r"magic number 1234, expected 2051") as info:
        parse_mnist(bad, labels)
    assert "bad-images.gz" in str(info.value)


def test_swapped_files_are_caught(fake_pair):
    images, labels, _ = fake_pair
    with pytest.raises(MNISTFormatError, match=r"magic number 2049, expected 2051.*swapped"):
        parse_mnist(labels, images)


def test_wrong_label_magic(write_idx, fake_pair):
    images, _, _ = fake_pair
    bad = write_idx("bad-labels.gz", 2051, (3,), bytes(3))
    with pytest.raises(MNISTFormatError, match=r"bad-labels.gz: magic number 2051, expected 2049"):
        parse_mnist(images, bad)


def test_truncated_payload(write_idx, fake_pair):
    _, labels, _ = fake_pair
    short = write_idx("short.gz", 2051, (3, 28, 28), bytes(3 * 784 - 10))
    expected = 16 + 3 * 784
    with pytest.raises(MNISTFormatError, match=rf"short.gz: truncated.*{expected} bytes, found {expected - 10}"):
        parse_mnist(short, labels)


def test_truncated_header(tmp_path, fake_pair):
    _, labels, _ = fake_pair
    path = tmp_path / "header.gz"
    path.write_bytes(gzip.compress((2051).to_bytes(4, "big") + bytes(5)))
    with pytest.raises(MNISTFormatError, match=r"truncated, expected 16 header bytes, found 9"):
        parse_mnist(path, labels)


def test_non_gzip_data(write_idx, fake_pair):
    _, labels, _ = fake_pair
    raw = write_idx("raw.gz", 2051, (3, 28, 28), bytes(3 * 784), compress=False)
    with pytest.raises(MNISTFormatError, match=r"raw.gz is not gzip data"):
        parse_mnist(raw, labels)


def test_cut_gzip_stream(tmp_path, fake_pair):
    images, labels, _ = fake_pair
    cut = tmp_path / "cut.gz"
    cut.write_bytes(images.read_bytes()[:-20])
    with pytest.raises(MNISTFormatError, match=r"cut.gz: the gzip stream is damaged or truncated"):
        parse_mnist(cut, labels)


def test_count_mismatch_names_both_files(write_idx, fake_pair):
    images, _, _ = fake_pair
    labels = write_idx("four-labels.gz", 2049, (4,), bytes(4))
    with pytest.raises(MNISTFormatError) as info:
        parse_mnist(images, labels)
    message = str(info.value)
    assert "images.gz has 3 images" in message and "four-labels.gz has 4 labels" in message


def test_wrong_image_dims(write_idx, fake_pair):
    _, labels, _ = fake_pair
    small = write_idx("small.gz", 2051, (3, 27, 28), bytes(3 * 27 * 28))
    with pytest.raises(MNISTFormatError, match=r"27x28, expected 28x28"):
        parse_mnist(small, labels)


def test_missing_file_is_file_not_found(tmp_path, fake_pair):
    _, labels, _ = fake_pair
    with pytest.raises(FileNotFoundError):
        MNISTDataset(tmp_path / "nope.gz", labels)
