"""See the graph: the lecture's v1 … v4 as text, and one MLP training step drawn as SVG.

    python examples/show_graph.py                 # prints both graphs
    python examples/show_graph.py --svg docs/mlp_step.svg   # also draws the MLP step (needs graphviz)
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needle as ndl
from needle import nn


def lecture_graph():
    """The lecture's example: v4 = exp(v1) * (exp(v1) + 1)."""
    v1 = ndl.Tensor([0.0])
    v2 = ndl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    return v4


def mlp_step_loss(seed=0):
    """The loss of one step of a small MLP on a random batch (what backward() would traverse)."""
    np.random.seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    images = ndl.Tensor(np.random.rand(32, 8), requires_grad=False)
    labels = ndl.Tensor(np.random.randint(0, 4, 32), requires_grad=False)
    return nn.SoftmaxLoss()(model(images), labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", help="also draw the MLP step to this .svg/.png path (needs graphviz)")
    args = parser.parse_args()
    ndl.viz.print_graph(lecture_graph())
    loss = mlp_step_loss()
    ndl.viz.print_graph(loss, values=False)
    if args.svg:
        print("wrote", ndl.viz.render(loss, args.svg))


if __name__ == "__main__":
    main()
