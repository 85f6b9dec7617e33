"""Convolution layer (the course's ``needle.nn.nn_conv``): NCHW in and out, "same" padding."""
from .. import init, ops
from .layers import _flag, _positive_int
from .module import Module, Parameter


class Conv(Module):
    """2-D convolution over NCHW images with padding ``kernel_size // 2``, as the course's ``nn.Conv``.

    ``weight`` has shape ``(k, k, in_channels, out_channels)``, drawn Kaiming-uniform over the
    fan-in ``k * k * in_channels``; ``bias`` has shape ``(out_channels,)``, uniform in
    ``±1 / sqrt(in_channels * k * k)``, drawn after the weight (the course's order, so
    ``numpy.random.seed`` reproduces its values). For PyTorch's ``Conv2d`` weight layout
    ``(out, in, k, k)`` use ``weight.numpy().transpose(3, 2, 0, 1)``.

    Every size is checked at construction: a TypeError or ValueError names the argument.

    Args:
        in_channels: channels of the input (axis 1).
        out_channels: channels of the output.
        kernel_size: side of the square kernel (an int).
        stride: step between windows.
        bias: whether to add a learnable bias.
        device: where the parameters live (default CPU).
        dtype: parameter element type.

    Example:
        >>> import needle as ndl
        >>> layer = ndl.nn.Conv(3, 8, 3, stride=2)
        >>> layer.weight.shape, layer.bias.shape
        ((3, 3, 3, 8), (8,))
        >>> layer(ndl.init.rand(2, 3, 32, 32)).shape
        (2, 8, 16, 16)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        bias: bool = True,
        device=None,
        dtype: str = "float32",
    ):
        super().__init__()
        if isinstance(kernel_size, tuple):
            if len(kernel_size) != 2 or kernel_size[0] != kernel_size[1]:
                raise ValueError(f"Conv takes a square kernel: kernel_size must be an int, got {kernel_size!r}")
            kernel_size = kernel_size[0]
        in_channels = _positive_int(in_channels, "in_channels", "Conv")
        out_channels = _positive_int(out_channels, "out_channels", "Conv")
        kernel_size = _positive_int(kernel_size, "kernel_size", "Conv")
        stride = _positive_int(stride, "stride", "Conv")
        _flag(bias, "bias", "Conv")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        fan_in = kernel_size * kernel_size * in_channels
        self.weight = Parameter(
            init.kaiming_uniform(
                fan_in,
                kernel_size * kernel_size * out_channels,
                shape=(kernel_size, kernel_size, in_channels, out_channels),
                device=device,
                dtype=dtype,
            )
        )
        self.bias = None
        if bias:
            bound = 1.0 / fan_in**0.5
            self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, device=device, dtype=dtype))

    def forward(self, x):
        if len(x.shape) != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"Conv({self.in_channels}, {self.out_channels}, {self.kernel_size}) needs NCHW input of shape "
                f"(batch, {self.in_channels}, height, width), got {x.shape}"
            )
        # NOTE: two swaps make NCHW into NHWC (a view); the output goes back the same way.
        nhwc = x.transpose((1, 2)).transpose((2, 3))
        out = ops.conv(nhwc, self.weight, stride=self.stride, padding=self.kernel_size // 2)
        if self.bias is not None:
            out = out + self.bias.reshape((1, 1, 1, self.out_channels)).broadcast_to(out.shape)
        return out.transpose((2, 3)).transpose((1, 2))
