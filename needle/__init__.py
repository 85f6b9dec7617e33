"""needle: the Necessary Elements of Deep Learning.

A small define-by-run framework (the CMU Deep Learning Systems course's API) over numpy on CPU and
CuPy on GPU, with live graph counters that the ``trainers`` package turns into leak warnings.
"""
from . import autograd
from .autograd import Op, TensorOp, TensorTuple, TensorTupleOp, Value, snapshot as graph_snapshot
from .tensor import Tensor
from .grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .seeding import manual_seed
from .denormals import is_flush_denormal_enabled, set_flush_denormal
from .serialization import load, save
from .backend_ndarray import NDArray, all_devices, cpu, cpu_numpy, cuda, default_device
from . import backend_ndarray, backend_selection, ops, init, deferred
from .backend_selection import BACKEND, Device, array_api  # noqa: F401  (course names, see needle.course_compat)
from .init import ones, ones_like, zeros, zeros_like  # noqa: F401  (the course's ndl.ones, ...)
from .ops import *  # noqa: F401,F403  (the course's ndl.add, ndl.matmul, ...)

__version__ = "0.1.0"
from . import nn, optim, data  # noqa: E402  (built on the core above)
from . import viz  # noqa: E402  (reads graphs of all of the above)
from .compiler import CaptureError, EagerFallbackWarning, RecaptureWarning, compile  # noqa: E402  (ndl.compile: captures steps of all of the above)
