"""End to end: an MLP built from needle.nn, trained with needle.optim on real MNIST, learns."""
import numpy as np

import needle as ndl
from needle import nn, optim
from needle.data import DataLoader, MNISTDataset, mnist


def test_mlp_one_short_epoch_on_mnist_beats_85_percent(device):
    np.random.seed(0)
    files = mnist()
    train = MNISTDataset(files.train_images, files.train_labels)
    test = MNISTDataset(files.test_images, files.test_labels)
    train_images, train_labels = train[np.arange(5000)]
    test_images, test_labels = test[np.arange(2000)]
    loader = DataLoader(
        ndl.data.NDArrayDataset(train_images.reshape(-1, 784), train_labels), 50, shuffle=True, device=device
    )
    model = nn.Sequential(nn.Linear(784, 128, device=device), nn.ReLU(), nn.Linear(128, 10, device=device))
    loss_fn = nn.SoftmaxLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    first_losses = []
    for images, labels in loader:
        optimizer.reset_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        first_losses.append(float(loss.numpy()))

    model.eval()
    with ndl.no_grad():
        logits = model(ndl.Tensor(test_images.reshape(-1, 784), device=device, requires_grad=False))
    accuracy = float((logits.numpy().argmax(axis=1) == test_labels).mean())
    assert accuracy > 0.85, f"test accuracy {accuracy:.3f} after one epoch on 5,000 images"
    assert np.mean(first_losses[-10:]) < np.mean(first_losses[:10]) / 2
