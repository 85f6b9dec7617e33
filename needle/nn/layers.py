"""Basic layers: Identity, Linear, Flatten, activations, Sequential, Residual, Dropout."""
import numbers

from .. import init, ops
from .module import Module, Parameter


def _positive_int(value, name, layer):
    """``value`` as an int of at least 1, or an error naming ``layer``'s argument ``name``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{layer}: {name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{layer}: {name} must be at least 1, got {name}={value}")
    return int(value)


def _flag(value, name, layer):
    if not isinstance(value, bool):
        raise TypeError(f"{layer}: {name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _module(value, name, layer):
    if not isinstance(value, Module):
        hint = " (unpack a list with nn.Sequential(*layers))" if isinstance(value, (list, tuple)) else ""
        raise TypeError(f"{layer}: {name} must be an nn.Module, got {type(value).__name__}{hint}")
    return value


class Identity(Module):
    """Returns its input unchanged."""

    def forward(self, x):
        return x


class Linear(Module):
    """``x @ weight + bias`` with weight (in_features, out_features) and bias (1, out_features).

    Both are drawn with Kaiming-uniform, weight first, exactly as the course does, so
    ``numpy.random.seed`` reproduces the course's values.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: whether to add a learnable bias.
        device: where the parameters live (default CPU).
        dtype: parameter element type.

    Example:
        >>> import needle as ndl
        >>> layer = ndl.nn.Linear(3, 2)
        >>> layer(ndl.Tensor([[1.0, 2.0, 3.0]])).shape, layer.bias.shape
        ((1, 2), (1, 2))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype="float32"):
        super().__init__()
        in_features = _positive_int(in_features, "in_features", "Linear")
        out_features = _positive_int(out_features, "out_features", "Linear")
        _flag(bias, "bias", "Linear")
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features, device=device, dtype=dtype))
        self.bias = None
        if bias:
            drawn = init.kaiming_uniform(out_features, 1, device=device, dtype=dtype)
            self.bias = Parameter(drawn.reshape((1, out_features)))

    def forward(self, X):
        return ops.linear(X, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Flatten(Module):
    """Reshape (batch, d1, d2, ...) to (batch, d1 * d2 * ...)."""

    def forward(self, X):
        shape = X.shape
        size = 1
        for dim in shape[1:]:
            size *= dim
        return X.reshape((shape[0], size))


class ReLU(Module):
    """max(x, 0) element-wise."""

    def forward(self, x):
        return ops.relu(x)


class Tanh(Module):
    """Hyperbolic tangent element-wise."""

    def forward(self, x):
        return ops.tanh(x)


class Sigmoid(Module):
    """The logistic function element-wise."""

    def forward(self, x):
        return ops.sigmoid(x)


class _Layers(tuple):
    """Sequential's layers: a tuple (the course's ``seq.modules[0]``) that is also callable
    (PyTorch's ``seq.modules()``: the Sequential and every module below it)."""

    def __new__(cls, owner, layers):
        layers = super().__new__(cls, layers)
        layers._owner = owner
        return layers

    def __call__(self):
        return Module.modules(self._owner)


class Sequential(Module):
    """Apply modules one after another.

    Example:
        >>> import needle as ndl
        >>> from needle import nn
        >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> model.modules[0].weight.shape, len(model.modules()), list(model.state_dict())[0]
        ((4, 3), 4, '0.weight')
    """

    def __init__(self, *modules):
        super().__init__()
        for position, module in enumerate(modules):
            _module(module, f"argument {position}", "Sequential")
        self._layers = tuple(modules)

    # NOTE: ``modules`` is a property so that it is both the course's tuple and the method.
    @property
    def modules(self):
        """The layers as a tuple; calling it (``seq.modules()``) lists every module, self first."""
        return _Layers(self, self._layers)

    @modules.setter
    def modules(self, layers):
        self._layers = tuple(layers)

    def _named_attributes(self):
        for name, value in self.__dict__.items():
            if name == "_layers":
                yield from ((str(index), layer) for index, layer in enumerate(value))
            else:
                yield name, value

    def __len__(self):
        return len(self._layers)

    def __getitem__(self, index):
        return self._layers[index]

    def __iter__(self):
        return iter(self._layers)

    def forward(self, x):
        for module in self._layers:
            x = module(x)
        return x


class Residual(Module):
    """``fn(x) + x``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = _module(fn, "fn", "Residual")

    def forward(self, x):
        return self.fn(x) + x


class Dropout(Module):
    """In training, zero each element with probability ``p`` and scale the rest by 1 / (1 - p).

    The mask is drawn as the course does (``init.randb(*x.shape, p=1 - p)``); in evaluation
    mode the input passes unchanged.

    Example:
        >>> import needle as ndl
        >>> drop = ndl.nn.Dropout(0.5).eval()
        >>> drop(ndl.Tensor([1.0, 2.0])).numpy().tolist()
        [1.0, 2.0]
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not isinstance(p, numbers.Real) or isinstance(p, bool):
            raise TypeError(f"Dropout: p must be a number in [0, 1], got {type(p).__name__} {p!r}")
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout probability must be in [0, 1], got p={p}")
        self.p = float(p)

    def extra_repr(self):
        return f"p={self.p}"

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = 1 - self.p
        mask = init.randb(*x.shape, p=keep, device=x.device, dtype=x.dtype)
        # NOTE: the mask is a constant, so scaling it adds no graph node; p == 1 drops everything.
        return x * (mask * (1 / keep) if keep > 0 else mask * 0)
