import numpy as np
import pytest

from needle.data import MNISTDataset, RandomCrop, RandomFlipHorizontal, Transform


def image_3x3():
    return np.arange(9).reshape(3, 3, 1)


def test_flip_follows_the_global_generator():
    # np.random.seed(0); np.random.rand() == 0.5488...
    np.random.seed(0)
    flipped = RandomFlipHorizontal(p=0.6)(image_3x3())
    np.testing.assert_array_equal(flipped[:, :, 0], [[2, 1, 0], [5, 4, 3], [8, 7, 6]])
    np.random.seed(0)
    kept = RandomFlipHorizontal(p=0.5)(image_3x3())
    np.testing.assert_array_equal(kept, image_3x3())


def test_flip_draws_exactly_one_number():
    np.random.seed(1)
    RandomFlipHorizontal()(image_3x3())
    after_flip = np.random.rand()
    np.random.seed(1)
    np.random.rand()
    assert after_flip == np.random.rand()


def test_crop_shift_down_left():
    # np.random.seed(3); np.random.randint(-1, 2, size=2) == [1, -1]:
    # the window starts at row 1 + 1 = 2, column 1 - 1 = 0 of the zero-padded 5x5 image.
    np.random.seed(3)
    cropped = RandomCrop(padding=1)(image_3x3())
    np.testing.assert_array_equal(cropped[:, :, 0], [[0, 3, 4], [0, 6, 7], [0, 0, 0]])


def test_crop_shift_up_left():
    # np.random.seed(14) draws [-1, -1]: the window starts at the padded image's corner.
    np.random.seed(14)
    cropped = RandomCrop(padding=1)(image_3x3())
    np.testing.assert_array_equal(cropped[:, :, 0], [[0, 0, 0], [0, 0, 1], [0, 3, 4]])


def test_crop_keeps_shape_and_channels():
    np.random.seed(0)
    img = np.random.rand(28, 28, 3).astype(np.float32)
    out = RandomCrop(padding=3)(img)
    assert out.shape == (28, 28, 3) and out.dtype == np.float32


def test_transform_arguments_are_checked():
    with pytest.raises(ValueError, match="p=1.5"):
        RandomFlipHorizontal(p=1.5)
    with pytest.raises(ValueError, match="padding=-1"):
        RandomCrop(padding=-1)
    with pytest.raises(NotImplementedError):
        Transform()(image_3x3())


def test_mnist_applies_transforms_per_sample(fake_pair):
    images, labels, pixels = fake_pair
    seen = []

    def flip_and_record(image):
        seen.append(image.shape)
        return RandomFlipHorizontal(p=1.0)(image)

    expected = (pixels.reshape(3, 28, 28, 1) / 255.0).astype(np.float32)[:, :, ::-1, :]
    for flat, shape in ((True, (784,)), (False, (28, 28, 1))):
        dataset = MNISTDataset(images, labels, transforms=[flip_and_record], flat=flat)
        image, label = dataset[1]
        assert image.shape == shape and image.dtype == np.float32
        np.testing.assert_array_equal(image, expected[1].reshape(shape))
        batch, batch_labels = dataset[np.array([2, 0])]
        np.testing.assert_array_equal(batch, expected[[2, 0]].reshape((2,) + shape))
        np.testing.assert_array_equal(batch_labels, [9, 7])
        assert dataset.as_arrays() is None  # transforms rule out device-resident arrays
        np.testing.assert_array_equal(dataset.images, (pixels.reshape(3, 784) / 255.0).astype(np.float32))  # untouched
    assert set(seen) == {(28, 28, 1)}  # transforms always see an image
