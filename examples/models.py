"""The course's example models, written with needle.nn: ResNet9 for CIFAR-10.

``ResNet9`` keeps the course's architecture and names, so course notebooks that import
``from models import ResNet9`` run unchanged.
"""
import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needle as ndl  # noqa: E402
from needle import nn  # noqa: E402


class ConvBN(nn.Module):
    """``Conv`` then ``BatchNorm2d`` then ``ReLU``: the course's building block (NCHW in and out).

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: side of the square kernel ("same" padding ``kernel_size // 2``).
        stride: step between windows.
        device: where the parameters live.
        dtype: parameter element type.

    Example:
        >>> block = ConvBN(3, 8, 3, stride=2)
        >>> block(ndl.init.rand(2, 3, 8, 8)).shape
        (2, 8, 4, 4)
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, device=None, dtype="float32"
    ):
        super().__init__()
        self.conv = nn.Conv(in_channels, out_channels, kernel_size, stride=stride, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(out_channels, device=device, dtype=dtype)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class ResNet9(nn.Module):
    """The course's ResNet9 for 3 x 32 x 32 images (CIFAR-10), 10 logits out.

    ConvBN blocks 3->16 (k7, s4), 16->32 (k3, s2), a residual pair 32->32, 32->64 (s2),
    64->128 (s2), a residual pair 128->128, then Flatten, Linear 128->128, ReLU, Linear 128->10.

    Args:
        device: where the parameters live.
        dtype: parameter element type.

    Example:
        >>> import numpy as np
        >>> np.random.seed(0)
        >>> model = ResNet9()
        >>> model(ndl.init.rand(2, 3, 32, 32)).shape
        (2, 10)
        >>> sum(int(np.prod(p.shape)) for p in model.parameters())
        431946
    """

    def __init__(self, device=None, dtype="float32"):
        super().__init__()

        def block(in_channels, out_channels, kernel_size, stride):
            return ConvBN(in_channels, out_channels, kernel_size, stride, device=device, dtype=dtype)

        self.model = nn.Sequential(
            block(3, 16, 7, 4),
            block(16, 32, 3, 2),
            nn.Residual(nn.Sequential(block(32, 32, 3, 1), block(32, 32, 3, 1))),
            block(32, 64, 3, 2),
            block(64, 128, 3, 2),
            nn.Residual(nn.Sequential(block(128, 128, 3, 1), block(128, 128, 3, 1))),
            nn.Flatten(),
            nn.Linear(128, 128, device=device, dtype=dtype),
            nn.ReLU(),
            nn.Linear(128, 10, device=device, dtype=dtype),
        )

    def forward(self, x):
        return self.model(x)
