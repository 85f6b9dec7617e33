"""Gradients of gradients: the graph that ``backward()`` builds is itself differentiated correctly.

For an op ``f`` and fixed random weights ``V`` and ``W``, take ``L = sum(V * f(inputs))`` and
``g = sum(W * dL/d input_k)``. ``backward()`` on ``g`` must give the same gradients as central
differences of ``g``, where each ``g`` is computed with an exact first-order backward.
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.ops.ops_mathematic import astype

rng = np.random.default_rng(7)


def first_order(fn, arrays, wrt, v, device):
    tensors = [ndl.Tensor(a, device=device, dtype="float64") for a in arrays]
    (fn(*tensors) * ndl.Tensor(v, device=device, dtype="float64")).sum().backward()
    return tensors, tensors[wrt].grad


def g_value(fn, arrays, wrt, v, w, device):
    _, first = first_order(fn, arrays, wrt, v, device)
    return float((first.numpy() * w).sum())


def second_order_check(fn, arrays, wrt, device, eps=1e-6, rtol=1e-5, atol=1e-7):
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out_shape = fn(*[ndl.Tensor(a, dtype="float64") for a in arrays]).shape
    v, w = rng.normal(size=out_shape), rng.normal(size=arrays[wrt].shape)
    tensors, first = first_order(fn, arrays, wrt, v, device)
    assert first.op is not None, "backward() must build the gradient as a graph"
    for t in tensors:
        t.grad = None
    (first * ndl.Tensor(w, device=device, dtype="float64")).sum().backward()
    nonzero = False
    for k, (tensor, array) in enumerate(zip(tensors, arrays)):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
            plus[k][index] += eps
            minus[k][index] -= eps
            numeric[index] = (g_value(fn, plus, wrt, v, w, device) - g_value(fn, minus, wrt, v, w, device)) / (2 * eps)
        analytic = np.zeros_like(array) if tensor.grad is None else tensor.grad.numpy()
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol, err_msg=f"input {k}")
        nonzero |= bool(np.any(np.abs(numeric) > 1e-6))
    assert nonzero, "the case must have a second-order term to check"


CASES = [
    ("matmul", ops.matmul, [(3, 4), (4, 2)], 0),
    ("matmul_transpose_a", lambda a, b: ops.MatMul(True, False)(a, b), [(4, 3), (4, 2)], 0),
    ("matmul_transpose_b", lambda a, b: ops.MatMul(False, True)(a, b), [(3, 4), (2, 4)], 1),
    ("matmul_transpose_both", lambda a, b: ops.MatMul(True, True)(a, b), [(4, 3), (2, 4)], 0),
    ("matmul_transpose_batched", lambda a, b: ops.MatMul(True, False)(a, b), [(2, 4, 3), (4, 2)], 1),
    ("linear_wrt_input", ops.linear, [(3, 4), (4, 2), (1, 2)], 0),
    ("linear_wrt_weight", ops.linear, [(3, 4), (4, 2), (1, 2)], 1),
    ("sum_to_shape_times_itself", lambda a: ops.sum_to_shape(a, (1, 3)) * ops.sum_to_shape(a, (1, 3)), [(2, 3)], 0),
]


@pytest.mark.parametrize("fn, shapes, wrt", [pytest.param(f, s, k, id=name) for name, f, s, k in CASES])
def test_gradient_of_gradient_matches_central_differences(fn, shapes, wrt, device):
    second_order_check(fn, [rng.normal(size=shape) for shape in shapes], wrt, device)


def test_astype_gradient_of_gradient_at_the_same_dtype(device):
    second_order_check(lambda a: astype(a, "float64") * astype(a * a, "float64"), [rng.normal(size=(3, 2))], 0, device)


def test_astype_gradient_of_gradient_through_float32(device):
    # float32 in the middle: a wider step and tolerance than float64's
    second_order_check(lambda a, b: astype(astype(a, "float32") * astype(b, "float32"), "float64") * a,
                       [rng.uniform(0.5, 2, size=(4,)), rng.uniform(0.5, 2, size=(4,))], 0, device,
                       eps=1e-3, rtol=1e-3, atol=1e-4)
