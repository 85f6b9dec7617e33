"""examples/mlp_resnet.py: the course's MLP-ResNet names, shapes and training on a small MNIST subset."""
import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.data import DataLoader, MNISTDataset, NDArrayDataset, mnist
from example_scripts import load_example


@pytest.fixture(scope="module")
def mlp_resnet():
    return load_example("mlp_resnet")


def count_parameters(model):
    return sum(int(np.prod(p.shape)) for p in model.parameters())


def test_residual_block_layout_and_parameter_count(mlp_resnet):
    block = mlp_resnet.ResidualBlock(dim=8, hidden_dim=4, norm=nn.LayerNorm1d, drop_prob=0.0)
    # Linear(8,4) + norm(4) + Linear(4,8) + norm(8): weights, biases, and two (w, b) per norm
    assert count_parameters(block) == (8 * 4 + 4) + 2 * 4 + (4 * 8 + 8) + 2 * 8
    x = ndl.Tensor(np.random.default_rng(0).standard_normal((3, 8)).astype("float32"))
    out = block(x).numpy()
    assert out.shape == (3, 8) and (out >= 0).all()  # the block ends in a ReLU


def test_mlp_resnet_shapes_and_size(mlp_resnet):
    model = mlp_resnet.MLPResNet(784, hidden_dim=100, num_blocks=3)
    per_block = (100 * 50 + 50) + 2 * 50 + (50 * 100 + 100) + 2 * 100
    assert count_parameters(model) == (784 * 100 + 100) + 3 * per_block + (100 * 10 + 10)
    assert model(ndl.init.rand(5, 784)).shape == (5, 10)


def small_loaders(count=2000):
    files = mnist()
    train = MNISTDataset(str(files.train_images), str(files.train_labels))
    test = MNISTDataset(str(files.test_images), str(files.test_labels))
    train_x, train_y = train[np.arange(count)]
    test_x, test_y = test[np.arange(500)]
    return (
        DataLoader(NDArrayDataset(train_x, train_y), batch_size=100, shuffle=True),
        DataLoader(NDArrayDataset(test_x, test_y), batch_size=100),
    )


def test_epoch_trains_then_evaluates_a_small_subset(mlp_resnet):
    np.random.seed(0)
    train_loader, test_loader = small_loaders()
    model = mlp_resnet.MLPResNet(784, hidden_dim=64)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    first_error, first_loss = mlp_resnet.epoch(train_loader, model, opt)
    for _ in range(2):
        train_error, train_loss = mlp_resnet.epoch(train_loader, model, opt)
    assert model.training
    assert 0 <= train_error < first_error and train_loss < first_loss
    test_error, test_loss = mlp_resnet.epoch(test_loader, model)
    assert not model.training
    assert test_error < 0.35 and np.isfinite(test_loss)  # chance is 0.9
    

def test_evaluation_records_no_graph(mlp_resnet, graph_baseline):
    _, test_loader = small_loaders(100)
    model = mlp_resnet.MLPResNet(784, hidden_dim=16, num_blocks=1)
    before = graph_baseline()
    mlp_resnet.epoch(test_loader, model)
    assert graph_baseline().nodes_created == before.nodes_created


def test_train_mnist_returns_the_four_figures(mlp_resnet, tmp_path):
    # an empty data_dir: the packaged MNIST is used; one epoch of a narrow model keeps this short
    figures = mlp_resnet.train_mnist(batch_size=250, epochs=1, lr=0.01, hidden_dim=32, data_dir=str(tmp_path))
    assert len(figures) == 4
    train_error, train_loss, test_error, test_loss = figures
    assert 0 <= train_error < 0.3 and 0 <= test_error < 0.2  # chance is 0.9
    assert np.isfinite(train_loss) and np.isfinite(test_loss)
