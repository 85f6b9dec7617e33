"""A small training setup run eagerly and compiled, for the ndl.compile tests."""
import numpy as np

import needle as ndl
import needle.nn as nn

FEATURES, CLASSES, SAMPLES = 12, 4, 150


def data(seed=3):
    rng = np.random.RandomState(seed)
    return rng.randn(SAMPLES, FEATURES).astype(np.float32), rng.randint(0, CLASSES, SAMPLES)


def model_and_optimizer(optimizer="sgd"):
    np.random.seed(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, CLASSES)
    )
    if optimizer == "sgd":
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    else:
        opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)
    return model, opt


def step_function(model, opt, loss_fn=None):
    loss_fn = loss_fn or nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def train(step, opt, steps, batch_size=32, lr_change=None, seed=1):
    """``steps`` steps over the data in order (the last batch of each pass is partial)."""
    images, labels = data()
    np.random.seed(seed)
    losses, position = [], 0
    for index in range(steps):
        if lr_change is not None and index == lr_change[0]:
            opt.lr = lr_change[1]
        if position >= SAMPLES:
            position = 0
        x, y = images[position : position + batch_size], labels[position : position + batch_size]
        position += batch_size
        losses.append(step(ndl.Tensor(x), ndl.Tensor(y)).numpy().copy())
    return losses


def state_arrays(model, opt):
    """Every array of the model and the optimizer, as numpy copies, by name."""
    arrays = {f"model.{name}": value.copy() for name, value in model.state_dict().items()}
    for index, entry in opt.state_dict()["state"].items():
        for name, value in entry.items():
            arrays[f"opt.{index}.{name}"] = np.array(value).copy()
    return arrays
