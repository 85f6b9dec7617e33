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


# ---- the course's draw order ------------------------------------------------------------------------
def course_linear(rng_draw, in_features, out_features):
    """A Linear's (weight, bias) drawn as needle's init does: Kaiming uniform from numpy's global
    RNG, weight (in, out) first, then the bias as a (out, 1) draw with fan_in = out."""
    weight_bound = np.sqrt(2) * np.sqrt(3 / in_features)
    weight = rng_draw(in_features, out_features) * 2 * weight_bound - weight_bound
    bias_bound = np.sqrt(2) * np.sqrt(3 / out_features)
    bias = rng_draw(out_features, 1) * 2 * bias_bound - bias_bound
    return weight.astype(np.float32), bias.reshape(1, out_features).astype(np.float32)


def batch_norm(x, eps=1e-5):
    mean = x.mean(axis=0)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=0) + eps)  # weight 1, bias 0 at init


def course_mlp_resnet_forward(x, dim, hidden_dim, num_blocks, num_classes, seed):
    """MLPResNet's forward in train mode (batch statistics, drop_prob=0), weights drawn in the course's
    order: the first Linear, then each block's two Linears, then the last Linear."""
    np.random.seed(seed)
    first = course_linear(np.random.rand, dim, hidden_dim)
    blocks = [
        (course_linear(np.random.rand, hidden_dim, hidden_dim // 2), course_linear(np.random.rand, hidden_dim // 2, hidden_dim))
        for _ in range(num_blocks)
    ]
    last = course_linear(np.random.rand, hidden_dim, num_classes)
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    h = relu(x @ first[0] + first[1])
    for (w1, b1), (w2, b2) in blocks:
        inner = relu(batch_norm(h @ w1 + b1))
        h = relu(h + batch_norm(inner @ w2 + b2))
    return h @ last[0] + last[1]


def test_a_seeded_mlp_resnet_draws_its_weights_in_the_courses_order(mlp_resnet):
    x = np.random.default_rng(7).random((6, 20)).astype(np.float32)  # its own generator: the seed below is the model's
    np.random.seed(3)
    model = mlp_resnet.MLPResNet(20, hidden_dim=12, num_blocks=2, num_classes=5, drop_prob=0.0)
    model.train()
    got = model(ndl.Tensor(x)).numpy()
    want = course_mlp_resnet_forward(x.astype(np.float64), 20, 12, 2, 5, seed=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    first_weight = model.parameters()[0].numpy()
    np.random.seed(3)
    np.testing.assert_array_equal(first_weight, course_linear(np.random.rand, 20, 12)[0])  # the first draw is the first Linear's
