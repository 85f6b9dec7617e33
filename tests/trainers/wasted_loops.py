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


def training_accuracy(monitor, iterations, no_grad=False):
    """A second forward on the training batch to compute training accuracy."""
    model, opt, loss_fn = classifier()
    hits = 0
    for x, y in data(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if no_grad:
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
        probabilities = ndl.ops.exp(logits)  # a metric computed with grad on, through no parameter
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


def NoGradWarningType():
    from trainers import NoGradWarning

    return NoGradWarning
