"""Sequential MNIST (examples/mnist_lstm.py): an LSTM over the 28 rows learns on a small subset."""
import sys

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.data import DataLoader, MNISTDataset, NDArrayDataset, mnist
from example_scripts import load_example


@pytest.fixture(scope="module")
def mnist_lstm():
    return load_example("mnist_lstm")


def test_rows_become_time_steps(mnist_lstm):
    images = np.arange(2 * 784, dtype=np.float32).reshape(2, 784)
    rows = mnist_lstm.images_as_row_sequences(ndl.Tensor(images, requires_grad=False))
    assert rows.shape == (28, 2, 28)
    np.testing.assert_array_equal(rows.numpy()[3, 1], images[1].reshape(28, 28)[3])
    with pytest.raises(ValueError, match="784 pixels"):
        mnist_lstm.images_as_row_sequences(ndl.init.ones(2, 100))


def test_lstm_learns_a_small_mnist_subset(mnist_lstm, device):
    np.random.seed(0)
    files = mnist()
    train = MNISTDataset(files.train_images, files.train_labels)
    test = MNISTDataset(files.test_images, files.test_labels)
    train_images, train_labels = train[np.arange(6000)]
    test_images, test_labels = test[np.arange(1000)]
    loader = DataLoader(NDArrayDataset(train_images.reshape(-1, 784), train_labels), 50, shuffle=True, device=device)
    model = mnist_lstm.SequentialMNISTLSTM(hidden_size=32, device=device)
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.SoftmaxLoss()
    for images, labels in loader:
        optimizer.reset_grad()
        loss_fn(model(images), labels).backward(create_graph=False)
        optimizer.step()
    model.eval()
    with ndl.no_grad():
        logits = model(ndl.Tensor(test_images.reshape(-1, 784), device=device, requires_grad=False))
    accuracy = float((logits.numpy().argmax(axis=1) == test_labels).mean())
    assert accuracy > 0.6, f"test accuracy {accuracy:.3f} after one epoch on 6,000 images (chance: 0.1)"


def test_train_mnist_takes_model_lstm(capsys):
    example = load_example("train_mnist")
    saved_path = list(sys.path)
    try:
        test = example.main(["--model", "lstm", "--hidden", "16", "--train-samples", "500", "--epochs", "1", "--no-progress"])
    finally:
        sys.path[:] = saved_path
    assert "LSTM 28x28-16-10" in capsys.readouterr().out
    assert 0 <= test["accuracy"] <= 1
