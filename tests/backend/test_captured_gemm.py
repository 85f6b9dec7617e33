"""The column-major GEMM call that stands in for ``a @ b`` during a CUDA capture, checked on numpy.

``gemm_call`` chooses the operands, transposes and leading dimensions as CuPy does; a reference
column-major GEMM written here reads the arrays' memory exactly as cuBLAS would, so a wrong
transpose flag or leading dimension gives a wrong product.
"""
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from needle.backend_ndarray import products
from needle.backend_ndarray.captured_gemm import NotCapturable, gemm_call


def _memory(x):
    """The elements from x's first address on, as cuBLAS sees its pointer (enough for x's extent)."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.strides)) // x.itemsize
    return as_strided(x, shape=(extent,), strides=(x.itemsize,))


def _column_major_gemm(call):
    """C (m x n, column order, leading dimension ldc) = op(first) @ op(second), read from memory."""
    m, n, k = call["m"], call["n"], call["k"]
    first, second = _memory(call["first"]), _memory(call["second"])

    def element(memory, ld, trans, row, col):  # op(X)[row, col]
        return memory[col + row * ld] if trans else memory[row + col * ld]

    out = np.zeros(m * n + (n - 1) * (call["ldc"] - m), dtype=call["first"].dtype)
    for i in range(m):
        for j in range(n):
            total = 0.0
            for l in range(k):
                total += element(first, call["ld_first"], call["trans_first"], i, l) * element(
                    second, call["ld_second"], call["trans_second"], l, j
                )
            out[i + j * call["ldc"]] = total
    return out[: m * n].reshape(n, m)  # column-major m x n is row-major n x m: a @ b


def _layouts(rng, rows, cols, dtype):
    base = rng.standard_normal((rows, cols)).astype(dtype)
    wide = rng.standard_normal((rows, cols * 2)).astype(dtype)
    tall = rng.standard_normal((cols, rows)).astype(dtype)
    return {
        "C-ordered": base,
        "F-ordered": np.asfortranarray(base),
        "transposed view": tall.T,
        "column slice": wide[:, ::2],  # neither C- nor F-contiguous: copied first
        "row block of a wider array": wide[:, :cols],  # rows strided: neither contiguous
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [(4, 3, 5), (1, 6, 2), (5, 1, 3), (3, 4, 1), (7, 7, 7)])
def test_the_call_computes_a_at_b_for_every_layout(dtype, shapes):
    n, k, m = shapes
    rng = np.random.default_rng(0)
    for a_name, a in _layouts(rng, n, k, dtype).items():
        for b_name, b in _layouts(rng, k, m, dtype).items():
            if n == 1 and m == 1:
                continue
            got = _column_major_gemm(gemm_call(a, b))
            np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"a {a_name}, b {b_name}")


def test_a_c_ordered_product_takes_no_copy_and_transposes_nothing():
    a, b = np.ones((32, 784), np.float32), np.ones((784, 128), np.float32)
    call = gemm_call(a, b)
    assert call["first"] is b and call["second"].base is a  # a.T, a view
    assert (call["trans_first"], call["trans_second"]) == (0, 0)
    assert (call["m"], call["n"], call["k"], call["ld_first"], call["ld_second"], call["ldc"]) == (128, 32, 784, 128, 784, 128)


@pytest.mark.parametrize(
    "a, b, words",
    [
        (np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32), "only 2-D"),
        (np.ones((3, 4), np.float32), np.ones((4, 2), np.float64), "only float32 and float64"),
        (np.ones((3, 4), np.int64), np.ones((4, 2), np.int64), "only float32 and float64"),
        (np.ones((1, 4), np.float32), np.ones((4, 1), np.float32), "another path"),
    ],
)
def test_products_it_does_not_cover_are_named(a, b, words):
    with pytest.raises(NotCapturable, match=words):
        gemm_call(a, b)


def test_mismatched_shapes_are_a_value_error():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 2\)"):
        gemm_call(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))


def test_products_route_through_the_capture_product_only_in_the_capturing_thread():
    import threading

    a, b = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
    assert products.matmul(a, b).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    seen, elsewhere = [], []
    with products.capturing(lambda x, y: seen.append((x, y)) or "captured"):
        assert products.matmul(a, b) == "captured" and seen == [(a, b)]
        other = threading.Thread(target=lambda: elsewhere.append(products.matmul(a, b)))
        other.start()
        other.join()
        with pytest.raises(RuntimeError, match="another thread is capturing"):
            with products.capturing(lambda x, y: None):
                pass
    assert elsewhere[0].tolist() == [[3.0, 3.0], [3.0, 3.0]]  # another thread: a plain product
    assert products.matmul(a, b).tolist() == [[3.0, 3.0], [3.0, 3.0]]  # after the block
