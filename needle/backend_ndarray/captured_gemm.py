"""A matrix product that a CUDA stream capture can record: cuBLAS's GEMM called directly.

CuPy refuses every cuBLAS call while a stream captures ("calling cuBLAS API during stream
capture is currently unsupported"), though cuBLAS's GEMM itself can be captured. During a
capture, :class:`CapturedGemm` makes the call CuPy's ``a @ b`` makes for two 2-D float32 or
float64 arrays: ``cublasGemmEx`` on the same handle, with the same operand layout, compute type
and algorithm, on the capturing stream, so a replay computes what the eager step computed.
Products it does not cover (batched, vectors, other dtypes) raise :class:`NotCapturable`.

The layout (:func:`gemm_call`) is plain array arithmetic, tested on numpy arrays; the library
call needs a GPU (``benchmarks/gpu_check.sh``).
"""
import ctypes
import ctypes.util

import numpy

# Enum values of the CUDA and cuBLAS headers (cudaDataType_t, cublasComputeType_t, cublasGemmAlgo_t).
CUDA_R_32F, CUDA_R_64F = 0, 1
COMPUTE = {  # (dtype char, CuPy's compute type: default, pedantic, TF32) -> cublasComputeType_t
    ("f", "default"): 68, ("f", "pedantic"): 69, ("f", "tf32"): 77,
    ("d", "default"): 70, ("d", "pedantic"): 71, ("d", "tf32"): 70,
}
GEMM_DEFAULT, GEMM_DEFAULT_TENSOR_OP = -1, 99


class NotCapturable(Exception):
    """A product this module cannot record into a CUDA graph (the step then runs eagerly)."""


def _operand(x, trans):
    """``x`` (2-D) as cuBLAS reads it, as CuPy lays it out: (array, transposed?, leading dimension)."""
    if x.flags.f_contiguous:
        return x, trans, max(x.strides[1] // x.itemsize, x.shape[0])
    if not x.flags.c_contiguous:
        x = x.copy()
    return x, 1 - trans, x.strides[0] // x.itemsize


def gemm_call(a, b):
    """The arguments of the column-major GEMM that gives the C-ordered ``a @ b`` (a: n x k, b: k x m).

    cuBLAS reads matrices in column order, so, as CuPy does, it computes ``c^T = b^T a^T``: the
    returned dict holds ``trans_first``/``trans_second`` (0 or 1), ``m, n, k``, the two operands
    (possibly copied to be contiguous) with their leading dimensions, and ``ldc``.
    """
    if a.ndim != 2 or b.ndim != 2:
        raise NotCapturable(f"a product of shapes {a.shape} and {b.shape} (only 2-D products are captured)")
    if a.dtype != b.dtype or a.dtype.char not in "fd":
        raise NotCapturable(f"a product of {a.dtype} and {b.dtype} (only float32 and float64 products are captured)")
    n, k = a.shape
    m = b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit")
    if 0 in (n, m, k) or (n == 1 and m == 1):
        raise NotCapturable(f"a product of shapes {a.shape} and {b.shape} (CuPy takes another path for it)")
    first, trans_first, ld_first = _operand(b, 1)
    second, trans_second, ld_second = _operand(a.T, 0)
    return {
        "trans_first": trans_first, "trans_second": trans_second, "m": m, "n": n, "k": k,
        "first": first, "ld_first": ld_first, "second": second, "ld_second": ld_second, "ldc": m,
    }


def _cublas_library():
    """The cuBLAS library CuPy loaded (found in this process's mappings), else the system's."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libcublas.so" in path:
                    return ctypes.CDLL(path)
    except OSError:
        pass
    for name in ("libcublas.so.13", "libcublas.so.12", ctypes.util.find_library("cublas")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    raise NotCapturable("the cuBLAS library could not be found to call it during capture")


class CapturedGemm:
    """``a @ b`` for CuPy arrays as a direct ``cublasGemmEx`` call on the current stream."""

    def __init__(self):  # pragma: no cover - needs a GPU (benchmarks/gpu_check.sh)
        import cupy
        from cupy._core import _routines_linalg

        library = _cublas_library()
        self._gemm = library.cublasGemmEx
        self._gemm.restype = ctypes.c_int
        self._set_stream = getattr(library, "cublasSetStream_v2", None) or library.cublasSetStream
        self._set_stream.restype = ctypes.c_int
        self._cupy = cupy
        self._compute_type = getattr(_routines_linalg, "get_compute_type", lambda dtype: 1)
        capability = int(cupy.cuda.device.get_compute_capability())
        self._algo = GEMM_DEFAULT_TENSOR_OP if capability >= 80 else GEMM_DEFAULT

    def __call__(self, a, b):  # pragma: no cover - needs a GPU
        if isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray):
            return a @ b
        cupy = self._cupy
        call = gemm_call(a, b)
        kind = {2: "pedantic", 7: "tf32"}.get(int(self._compute_type(a.dtype)), "default")
        compute = COMPUTE[(a.dtype.char, kind)]
        scalar = ctypes.c_float if a.dtype.char == "f" else ctypes.c_double
        data_type = CUDA_R_32F if a.dtype.char == "f" else CUDA_R_64F
        one, zero = scalar(1), scalar(0)
        out = cupy.empty((call["n"], call["m"]), dtype=a.dtype)
        handle = ctypes.c_void_p(cupy.cuda.device.get_cublas_handle())
        stream = ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)
        status = self._set_stream(handle, stream)
        if status == 0:
            status = self._gemm(
                handle, call["trans_first"], call["trans_second"], call["m"], call["n"], call["k"],
                ctypes.byref(one), ctypes.c_void_p(call["first"].data.ptr), data_type, call["ld_first"],
                ctypes.c_void_p(call["second"].data.ptr), data_type, call["ld_second"],
                ctypes.byref(zero), ctypes.c_void_p(out.data.ptr), data_type, call["ldc"], compute, self._algo,
            )
        if status != 0:
            raise NotCapturable(f"cublasGemmEx returned status {status} during capture")
        return out
