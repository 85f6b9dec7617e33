"""The matrix product of two raw arrays: the one place every op multiplies matrices.

It is ``a @ b``, except while ``needle.compiler.cuda_graph`` captures a step into a CUDA graph:
CuPy refuses cuBLAS during a stream capture, so for that time :data:`CAPTURE_PRODUCT` holds the
same cuBLAS call made directly (:class:`needle.backend_ndarray.captured_gemm.CapturedGemm`).
"""

CAPTURE_PRODUCT = None  # set for the duration of a CUDA graph capture, else None


def matmul(a, b):
    """``a @ b`` of raw numpy or CuPy arrays (during a CUDA capture, the capturable cuBLAS call)."""
    product = CAPTURE_PRODUCT
    if product is not None:
        return product(a, b)
    return a @ b
