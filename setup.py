"""What pyproject.toml cannot say: needle's optional C extensions.

- ``needle/backend_ndarray/_fused_updates.c`` runs SGD and Adam as one pass over the arrays, with
  the values of the numpy calls it replaces (see needle/backend_ndarray/fused_updates.py).
- ``needle/backend_ndarray/_fused_ops.c`` does the same for the pieces of softmax cross-entropy
  and ReLU's backward (see needle/backend_ndarray/fused_ops.py).
- ``needle/_denormals.c`` sets the calling thread's denormal mode, for
  ``needle.set_flush_denormal`` (see needle/denormals.py).
- ``needle/_backward_walk.c`` walks the graph for ``backward(create_graph=False)``: the same
  order and calls as the Python loops in needle/backward.py, without the interpreter's cost
  per node.

All are optional: where no C compiler is found the install still succeeds; needle then runs the
numpy calls and the Python loops, and ``set_flush_denormal`` returns False as on an unsupported CPU.
"""
import sys

from setuptools import Extension, setup

# NOTE: -ffp-contract=off keeps a * b + c two roundings, as numpy's two calls round it (a
# compiler may otherwise fuse them into one multiply-add where the target CPU has one).
# -fno-math-errno lets sqrt be the CPU's instruction (its values are IEEE's either way).
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-math-errno"]

setup(
    ext_modules=[
        Extension(
            "needle.backend_ndarray._fused_updates",
            ["needle/backend_ndarray/_fused_updates.c"],
            depends=["needle/backend_ndarray/_buffers.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        Extension(
            "needle.backend_ndarray._fused_ops",
            ["needle/backend_ndarray/_fused_ops.c"],
            depends=["needle/backend_ndarray/_buffers.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        Extension("needle._denormals", ["needle/_denormals.c"], optional=True),
        Extension("needle._backward_walk", ["needle/_backward_walk.c"], extra_compile_args=COMPILE_ARGS, optional=True),
    ]
)
