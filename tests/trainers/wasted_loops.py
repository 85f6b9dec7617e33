"""Loops that evaluate inside training iterations, as users write them, and their no_grad twins.

A line a warning must name ends with ``# site: NAME`` (found by :func:`patterns.site`-like lookup).
"""
import needle as ndl

from patterns import classifier, data


def site(name):
    with open(__file__) as handle:
        lines = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith(f"# site: {name}")]
    assert len(lines) == 1, name
    return lines[0]


def evaluate(model, loss_fn, batch):
    """A user's evaluation helper, called with grad mode on unless the caller turns it off."""
    x, y = batch
    return float(loss_fn(model(x), y).numpy())


def eval_every(monitor, iterations, k=3, no_grad=False):
    """A validation pass every k steps, right after opt.step()."""
    model, opt, loss_fn = classifier()
    val = next(data(1, seed=9))
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i % k == 0:
            if no_grad:
                with ndl.no_grad():
                    evaluate(model, loss_fn, val)
            else:
                evaluate(model, loss_fn, val)  # site: eval_every
        monitor.step()


def training_accuracy(monitor, iterations, no_grad=False, detach=False):
    """A second forward on the training batch to compute training accuracy (``detach``: the twin
    that reads the training forward's own logits, detached, instead)."""
    model, opt, loss_fn = classifier()
    hits = 0
    for x, y in data(iterations):
        opt.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        if detach:
            hits += int((logits.detach().numpy().argmax(1) == y.numpy()).sum())
        elif no_grad:
            with ndl.no_grad():
                hits += int((model(x).numpy().argmax(1) == y.numpy()).sum())
        else:
            hits += int((model(x).numpy().argmax(1) == y.numpy()).sum())  # site: train_accuracy
        monitor.step()


def metrics_on_logits(monitor, iterations):
    """Metrics on the training forward's own logits (softmax, argmax): nothing to warn."""
    model, opt, loss_fn = classifier()
    for x, y in data(iterations):
        opt.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        probabilities = ndl.ops.exp(logits)  # site: metric_on_logits
        float(probabilities.numpy().sum())
        float(loss.numpy())
        monitor.step()


def callback_evaluation(epochs=4, no_grad=False):
    """A Trainer callback that runs the model on held-out data in on_train_epoch_end."""
    import warnings

    from trainers import Callback, Trainer

    model, opt, loss_fn = classifier()
    val = next(data(1, seed=9))

    class Validate(Callback):
        def on_train_epoch_end(self, trainer, epoch, metrics):
            if no_grad:
                with ndl.no_grad():
                    evaluate(model, loss_fn, val)
            else:
                evaluate(model, loss_fn, val)  # site: callback_eval

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(model, opt, loss_fn, progress=False, callbacks=[Validate()]).fit(list(data(5)), epochs=epochs)
    return [w for w in caught if issubclass(w.category, NoGradWarningType())]


def plain_autograd(monitor, iterations):
    """A lesson's loop: parameters updated by hand, no optimizer anywhere (nothing is "frozen")."""
    from needle import nn

    w = nn.Parameter(ndl.Tensor([[0.5], [-0.5], [0.25], [0.0], [1.0], [-1.0]]))
    for x, y in data(iterations):
        loss = ((x @ w) ** 2).sum()
        loss.backward()
        w.data = w.data - 0.01 * w.grad.data
        w.grad = None
        monitor.step()


def NoGradWarningType():
    from trainers import NoGradWarning

    return NoGradWarning


@ndl.no_grad
def greedy_predict_no_grad(model, x):
    """The correct twin of :func:`greedy_predict`: decorated with ``@ndl.no_grad``."""
    return model(x).numpy().argmax(1)


def greedy_predict(model, x):
    """A user's greedy sampler/predict() helper: the class with the highest logit."""
    return model(x).numpy().argmax(1)


def sampler_in_loop(monitor, iterations, decorated=False, every=1):
    """A predict() helper called inside the training loop (every ``every`` iterations)."""
    model, opt, loss_fn = classifier()
    probe = next(data(1, seed=5))[0]
    predictions = []
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i % every == 0:
            if decorated:
                predictions.append(greedy_predict_no_grad(model, probe))
            else:
                predictions.append(greedy_predict(model, probe))  # site: sampler
        monitor.step()


def early_stopping(monitor, iterations, batches_per_epoch=4, no_grad=False):
    """An early-stopping check on the last batch of each epoch: validation loss against the best
    (the epoch's training loss summed as numbers, with ``.item()``)."""
    model, opt, loss_fn = classifier()
    val_x, val_y = next(data(1, seed=9))
    best, epoch_loss = float("inf"), 0.0
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        epoch_loss += loss.item()
        if i % batches_per_epoch == batches_per_epoch - 1:
            if no_grad:
                with ndl.no_grad():
                    val_loss = loss_fn(model(val_x), val_y).item()
            else:
                val_loss = loss_fn(model(val_x), val_y).item()  # site: early_stop
            if val_loss > best:
                epoch_loss = 0.0  # a real loop would stop here; this one goes on to be watched
            best, epoch_loss = min(best, val_loss), 0.0
        monitor.step()


def validation_iterations(monitor, iterations, every=5, no_grad=False):
    """Iterations that only evaluate (no backward()), every ``every``-th, between training ones."""
    model, opt, loss_fn = classifier()
    val = next(data(1, seed=9))
    for i, (x, y) in enumerate(data(iterations)):
        if i % every == every - 1:
            if no_grad:
                with ndl.no_grad():
                    evaluate(model, loss_fn, val)
            else:
                evaluate(model, loss_fn, val)  # site: val_iteration
        else:
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        monitor.step()


def frozen_features(monitor, iterations, fix=None):
    """A frozen feature extractor (its parameters in no optimizer) feeding a trained head, grad on."""
    from needle import nn, optim
    from patterns import CLASSES, FEATURES, HIDDEN

    frozen = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU())
    head = nn.Linear(HIDDEN, CLASSES)
    opt = optim.SGD(head.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()
    for x, y in data(iterations):
        opt.reset_grad()
        if fix == "no_grad":
            with ndl.no_grad():
                feats = frozen(x)
        elif fix == "detach":
            feats = frozen(x).detach()  # site: frozen_detach
        elif fix == "requires_grad":
            for p in frozen.parameters():
                p.requires_grad = False
            feats = frozen(x)
        else:
            feats = frozen(x)  # site: frozen
        loss = loss_fn(head(feats), y)
        loss.backward()
        opt.step()
        monitor.step()


def frozen_backbone_in_trainer(epochs=2, no_grad=False):
    """A Trainer fitting a head on a frozen backbone that the model's own forward runs with grad on."""
    import warnings

    from needle import nn, optim
    from patterns import CLASSES, FEATURES, HIDDEN
    from trainers import Trainer

    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU())
            self.head = nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            if no_grad:
                with ndl.no_grad():
                    feats = self.backbone(x)
            else:
                feats = self.backbone(x)  # site: frozen_backbone
            return self.head(feats)

    model = Student()
    opt = optim.SGD(model.head.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(model, opt, nn.SoftmaxLoss(), progress=False).fit(list(data(6)), epochs=epochs)
    return [w for w in caught if issubclass(w.category, NoGradWarningType())]
