"""needle's CuPy kernels compile, checked on a machine without a GPU.

The CUDA cases of the other tests run the kernels, but only where a GPU is. This test builds
the exact CUDA source CuPy would compile for each kernel (float32 and float64) and compiles
it with NVRTC for an H100/H200 (sm_90), without a driver, so a typo in a kernel fails CI on
any machine. It needs the ``kernel-check`` extra (CuPy and NVRTC); it uses CuPy's source
generator, a private function, and skips saying so if a CuPy release moves it.
"""
import io

import numpy as np
import pytest

import needle as ndl

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install -e '.[kernel-check]')")

from needle.backend_ndarray.cuda_kernels import KERNELS, SLOTS  # noqa: E402
from needle.backend_ndarray.kernels_cupy import CupyKernels  # noqa: E402

ARCH = "90"
FLOATS = [np.dtype(np.float32), np.dtype(np.float64)]


@pytest.fixture(scope="module")
def compile_source():
    """A function compiling CUDA source to a cubin with CuPy's options; skips without NVRTC."""
    from cupy.cuda import compiler, nvrtc

    try:
        nvrtc.getVersion()
    except Exception as error:
        pytest.skip(f"no NVRTC library ({type(error).__name__}); pip install -e '.[kernel-check]'")
    from cupy._core import core

    options = core.assemble_cupy_compiler_options(()) + ("-ftz=true",)

    def compile_for_sm90(source):
        # NOTE: compile_using_nvrtc asks the device for its architecture; there is none here.
        saved = compiler._get_arch_for_options_for_nvrtc
        compiler._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
        try:
            cubin, _ = compiler.compile_using_nvrtc(source, options, arch=ARCH, log_stream=io.StringIO())
        finally:
            compiler._get_arch_for_options_for_nvrtc = saved
        return cubin

    return compile_for_sm90


@pytest.fixture(scope="module")
def kernels():
    return CupyKernels(cupy)


def elementwise_source(kernel, types, scalars):
    """The CUDA source CuPy generates for ``kernel`` on contiguous arrays, ``types`` mapping each
    type placeholder ("T", "I") to a dtype."""
    try:
        from cupy._core import _carray, _kernel, _scalar
    except ImportError as error:
        pytest.skip(f"this CuPy release moved its kernel source generator ({error})")
    in_dtypes = tuple(np.dtype(p.dtype) if p.dtype is not None else types[p.ctype] for p in kernel.in_params)
    out_dtypes = tuple(np.dtype(p.dtype) if p.dtype is not None else types[p.ctype] for p in kernel.out_params)
    _, _, type_map = kernel._decide_params_type(in_dtypes, out_dtypes)
    array, indexer, scalar = 1, 2, 3  # the argument kinds of cupy/_core/_kernel.pxd
    arguments = []
    for param, param_dtype in zip(kernel.in_params + kernel.out_params, in_dtypes + out_dtypes):
        if param.name in scalars:
            arguments.append(_kernel._ArgInfo(scalar, _scalar.CScalar, param_dtype, 0, True, True))
        else:
            arguments.append(_kernel._ArgInfo(array, cupy.ndarray, param_dtype, 1, True, True))
    arguments.append(_kernel._ArgInfo(indexer, _carray.Indexer, None, 1, True, True))
    code = _kernel._get_elementwise_kernel_code(
        tuple(arguments), type_map, kernel.params, kernel.operation, kernel.name, kernel.preamble
    )
    return "#include <cupy/carray.cuh>\n" + code


def has_symbol(cubin, name):
    return b"\0" + name.encode() + b"\0" in cubin


SIZES = tuple(f"size{j}" for j in range(SLOTS))
# Each kernel and the parameters it is passed as scalars.
ELEMENTWISE = {
    "_relu_backward": (),
    "_softmax_cross_entropy_rows": ("classes",),
    "_softmax_cross_entropy_gradient": ("classes", "inverse_batch"),
    "_sgd_steps": ("lr", "weight_decay", *SIZES),
    "_momentum_steps": ("momentum", "step", "weight_decay", *SIZES),
    "_adam_steps": ("beta1", "beta2", "eps", "weight_decay", "step_size", "inverse_sqrt_c2", *SIZES),
    "_sgd_steps_from_table": SIZES,
    "_momentum_steps_from_table": SIZES,
    "_adam_steps_from_table": SIZES,
    "_next_table_row": ("rows",),
}
LABEL_TYPES = [np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.uint8)]


def type_cases():
    for attribute in sorted(ELEMENTWISE):
        labels = LABEL_TYPES if "softmax" in attribute else [None]
        for dtype in FLOATS:
            for label_dtype in labels:
                types = {"T": dtype} if label_dtype is None else {"T": dtype, "I": label_dtype}
                case_id = "-".join([attribute.strip("_"), *map(str, types.values())])
                yield pytest.param(attribute, types, id=case_id)


@pytest.mark.parametrize("attribute, types", list(type_cases()))
def test_elementwise_kernel_compiles(kernels, compile_source, attribute, types):
    kernel = getattr(kernels, attribute)
    cubin = compile_source(elementwise_source(kernel, types, ELEMENTWISE[attribute]))
    assert has_symbol(cubin, kernel.name)


def test_every_kernel_is_checked():
    assert set(ELEMENTWISE) == set(KERNELS)


def test_the_check_catches_a_broken_kernel(compile_source):
    """The compiler call above does reject bad code, so a pass means something."""
    from cupy.cuda import compiler

    broken = cupy.ElementwiseKernel("T x", "T y", "y = x * undefined_name", "needle_broken")
    with pytest.raises(compiler.CompileException, match="undefined_name"):
        compile_source(elementwise_source(broken, {"T": FLOATS[0]}, ()))


def test_kernels_are_not_used_without_a_gpu():
    """With CuPy but no GPU, the CUDA device stays off and says why."""
    if ndl.cuda().enabled():
        pytest.skip("a GPU is present; the CUDA cases of the other tests run the kernels")
    with pytest.raises(RuntimeError, match="not available"):
        ndl.cuda().xp
