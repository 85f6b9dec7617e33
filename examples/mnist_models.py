"""The convolutional MNIST model that ``examples/train_mnist.py --model cnn`` trains.

It takes MNIST batches flat ``(N, 784)`` (as ``parse_mnist`` and ``MNISTDataset`` give them) or
as images ``(N, 28, 28, 1)`` (as ``MNISTDataset(..., flat=False)`` does) and returns ``(N, 10)`` logits.
"""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from needle import nn  # noqa: E402

IMAGE_SIDE = 28


class ImagesAsNCHW(nn.Module):
    """Reshape flat (N, 784) or (N, 28, 28, 1) MNIST batches to (N, 1, 28, 28) for ``nn.Conv``."""

    def forward(self, x):
        # NOTE: with one channel, NHWC and NCHW hold the pixels in the same order: a reshape suffices.
        return x.reshape((x.shape[0], 1, IMAGE_SIDE, IMAGE_SIDE))


def cnn(device=None, dtype: str = "float32") -> nn.Module:
    """Three Conv + BatchNorm2d + ReLU blocks and a linear head.

    1->32 (5x5, stride 2: 28 -> 14), 32->64 (3x3, stride 2: 14 -> 7), 64->64 (3x3), then
    Linear(64 * 7 * 7 -> 128), ReLU, Linear(128 -> 10).

    Example:
        >>> import needle as ndl
        >>> model = cnn()
        >>> model(ndl.init.rand(2, 784)).shape
        (2, 10)
    """

    def block(in_channels, out_channels, kernel_size, stride):
        return [
            nn.Conv(in_channels, out_channels, kernel_size, stride=stride, device=device, dtype=dtype),
            nn.BatchNorm2d(out_channels, device=device, dtype=dtype),
            nn.ReLU(),
        ]

    return nn.Sequential(
        ImagesAsNCHW(),
        *block(1, 32, 5, 2),
        *block(32, 64, 3, 2),
        *block(64, 64, 3, 1),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128, device=device, dtype=dtype),
        nn.ReLU(),
        nn.Linear(128, 10, device=device, dtype=dtype),
    )

