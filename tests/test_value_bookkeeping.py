"""The per-Value bookkeeping in C (needle/_value_bookkeeping.c) against the Python it replaces.

A scenario that touches every counter the bookkeeping keeps (live tensors and nodes, spent and
unspent nodes, wasted bytes, live bytes per buffer with views, tuples and saved arrays, a graph
keeper's recipe) runs in two fresh interpreters, one with the C functions and one with
``NEEDLE_C_BOOKKEEPING=0``; every snapshot it takes must be the same. CI sets
``NEEDLE_REQUIRE_FUSED_UPDATES=1``: there the extension must have been built.
"""
import json
import os
import subprocess
import sys

import pytest

from needle import autograd, value_bookkeeping

SCENARIO = r'''
import gc, json
import numpy as np
import needle as ndl
from needle import autograd, nn, ops, value_bookkeeping

print(json.dumps({"enabled": value_bookkeeping.ENABLED}))
def report(label):
    gc.collect()
    s = autograd.snapshot()
    print(json.dumps({"label": label, **{k: v for k, v in s._asdict().items()}}))

report("start")
x = ndl.Tensor(np.arange(12.0, dtype="float32").reshape(3, 4))
view = x.reshape((4, 3))
parts = ops.split(ndl.Tensor(np.ones((2, 3), "float32")), axis=0)
first = parts[0]
report("leaves, a view, a tuple")
w = nn.Parameter(ndl.Tensor(np.ones((4, 2), "float32")))
loss = ops.relu(x @ w).sum()
report("a graph")
loss.backward()
report("after backward")
del loss
report("graph freed spent, the recipe kept")
w.grad.sum().backward()
report("gradient of a gradient")
wasted = (x @ w).sum()
del wasted
report("a forward nobody backpropagated")
model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(3):
    batch = ndl.Tensor(np.random.default_rng(step).normal(size=(6, 4)).astype("float32"), requires_grad=False)
    labels = ndl.Tensor(np.array([0, 1, 0, 1, 1, 0]), dtype="int64")
    opt.reset_grad()
    nn.SoftmaxLoss()(model(batch), labels).backward()
    opt.step()
    report(f"step {step}")
del x, view, parts, first, w, model, opt, batch, labels
report("end")
'''


def run_scenario(c_bookkeeping):
    env = dict(os.environ, NEEDLE_C_BOOKKEEPING="1" if c_bookkeeping else "0", PYTHONHASHSEED="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", SCENARIO], env=env, capture_output=True, text=True, check=True, cwd=root)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    return lines[0]["enabled"], lines[1:]


built = pytest.mark.skipif(not value_bookkeeping.ENABLED, reason=f"the bookkeeping runs in {value_bookkeeping.describe()}")


def test_ci_builds_the_extension():
    if os.environ.get("NEEDLE_REQUIRE_FUSED_UPDATES") != "1":
        pytest.skip("only where NEEDLE_REQUIRE_FUSED_UPDATES=1 (CI)")
    assert value_bookkeeping.ENABLED, value_bookkeeping.describe()
    assert autograd._fill is value_bookkeeping._value_bookkeeping.fill


@built
def test_the_c_bookkeeping_counts_what_the_python_counts():
    enabled, with_c = run_scenario(True)
    disabled, with_python = run_scenario(False)
    assert enabled and not disabled
    assert [entry["label"] for entry in with_c] == [entry["label"] for entry in with_python]
    start = with_c[0]
    for c_entry, python_entry in zip(with_c, with_python):
        assert c_entry == python_entry, f"at {c_entry['label']!r}"
    moved = {key for entry in with_c for key, value in entry.items() if key != "label" and value != start[key]}
    assert {"live_tensors", "live_nodes", "bytes_by_device", "live_spent_nodes", "wasted_nodes_freed",
            "unspent_bytes_freed", "backward_calls"} <= moved, moved  # the scenario exercises each counter


@built
def test_a_value_that_was_never_initialised_is_freed_quietly():
    value = autograd.Tensor.__new__(autograd.Tensor)
    before = autograd.TENSOR_COUNTER
    del value
    assert autograd.TENSOR_COUNTER == before
