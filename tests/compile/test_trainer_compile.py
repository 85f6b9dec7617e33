"""Trainer(compile=True): the same history and weights as without, and the monitor sees every step."""
import numpy as np

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Trainer

from steps import data, model_and_optimizer


def fit(compile, **options):
    model, opt = model_and_optimizer("adam")
    images, labels = data()
    loader = DataLoader(NDArrayDataset(images, labels), batch_size=32, shuffle=False)
    np.random.seed(2)
    trainer = Trainer(model, opt, progress=False, compile=compile, **options)
    trainer.fit(loader, epochs=3)
    return trainer, [p.numpy().copy() for p in model.parameters()]


def test_compiled_training_matches_eager_and_is_monitored_every_step():
    eager, eager_weights = fit(False)
    compiled, weights = fit(True)
    assert compiled.history.column("loss") == eager.history.column("loss")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(eager_weights, weights))
    step = compiled._forward_backward
    assert step.captures == 2 and step.replays == 15 - 2  # 5 batches a pass, the last one short
    assert len(compiled.monitor.history) == len(eager.monitor.history) == 15
    replayed = [record.live_nodes for record in compiled.monitor.history[5:]]  # both plans captured by then
    assert len(set(replayed)) == 1  # a replay builds no graph node, so none can pile up


def test_gradient_clipping_between_the_compiled_backward_and_the_step_matches_eager():
    eager, eager_weights = fit(False, gradient_clip_val=0.05)
    compiled, weights = fit(True, gradient_clip_val=0.05)
    assert compiled.history.column("loss") == eager.history.column("loss")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(eager_weights, weights))
    assert compiled._forward_backward.replays == 13


def test_the_main_jobs_cnn_and_lstm_train_alike_compiled():
    """``train_mnist.py --model cnn|lstm --compile``: a convolution's im2col windows and an LSTM's
    per-step buffers are part of the replay, so the weights are eager's, bitwise."""
    from test_models import MODELS

    for kind in ("cnn", "lstm"):
        make, shape, _ = MODELS[kind]
        weights = []
        for compile in (False, True):
            np.random.seed(0)
            model = make()
            opt = ndl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            rng = np.random.default_rng(2)
            batches = [
                (ndl.Tensor(rng.standard_normal(shape(size)).astype(np.float32)),
                 ndl.Tensor(rng.integers(0, 3, size), dtype="int64"))
                for size in (5, 5, 5, 3)
            ]
            Trainer(model, opt, progress=False, monitor=False, compile=compile).fit(batches, epochs=2)
            weights.append([p.numpy().copy() for p in model.parameters()])
        assert all(a.tobytes() == b.tobytes() for a, b in zip(*weights)), kind
