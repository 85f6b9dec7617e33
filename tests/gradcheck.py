"""A float64 central-difference gradient checker for needle functions.

``check_gradients(fn, inputs, device)`` evaluates ``fn`` on Tensors made from the numpy arrays
``inputs``, contracts the output with a fixed random weight ``w`` (so every output element
matters), and compares the gradients that ``backward`` stores in each input's ``.grad`` with
central differences of ``sum(fn(inputs) * w)``. Three paths are checked: both ``backward()``
calls, ``create_graph=True`` and ``create_graph=False`` (both from the ops' ``gradient_data``),
and ``"graph"``: the gradient graph that the course's ``.grad`` stands for, built by the ops'
``gradient`` (what a gradient of a gradient differentiates).
"""
import numpy as np

import needle as ndl


def _evaluate(fn, arrays, device, requires_grad):
    tensors = [ndl.Tensor(a, device=device, dtype="float64", requires_grad=requires_grad) for a in arrays]
    return tensors, fn(*tensors)


def _weight_like(shape):
    return np.random.default_rng(1234).uniform(0.5, 1.5, size=shape)


def numerical_gradients(fn, arrays, device, eps=1e-6):
    """Central differences of ``sum(fn(*arrays) * w)`` with respect to every element of every input."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    weight = None
    grads = []
    for array in arrays:
        grad = np.zeros_like(array)
        flat, grad_flat = array.reshape(-1), grad.reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            values = []
            for shifted in (original + eps, original - eps):
                flat[i] = shifted
                with ndl.no_grad():
                    out = _evaluate(fn, arrays, device, requires_grad=False)[1].numpy()
                if weight is None:
                    weight = _weight_like(out.shape)
                values.append(float(np.sum(out * weight)))
            flat[i] = original
            grad_flat[i] = (values[0] - values[1]) / (2 * eps)
        grads.append(grad)
    return grads


def analytic_gradients(fn, arrays, device, create_graph):
    """The ``.grad`` of each input after ``fn(*inputs).backward(w, create_graph=...)``; with
    ``create_graph="graph"``, the value of the gradient graph each ``.grad`` stands for."""
    tensors, out = _evaluate(fn, arrays, device, requires_grad=True)
    weight = ndl.Tensor(_weight_like(out.shape), device=device, dtype="float64", requires_grad=False)
    out.backward(weight, create_graph=create_graph is not False)
    grads = []
    for i, tensor in enumerate(tensors):
        grad = tensor.grad
        if grad is None:
            grads.append(None)  # the output does not depend on this input
            continue
        if create_graph == "graph":
            grad = grad.op.graphs.of(tensor)  # built from the ops' gradient()
        assert grad.shape == tensor.shape, f"input {i}: gradient shape {grad.shape} != input shape {tensor.shape}"
        assert grad.dtype == np.float64, f"input {i}: gradient dtype {grad.dtype}, expected float64"
        grads.append(grad.numpy())
    return grads


def check_gradients(fn, arrays, device, rtol=1e-5, atol=1e-6, eps=1e-6):
    """Assert that both backward paths match central differences; returns the numerical gradients.

    Args:
        fn: a function of Tensors returning one Tensor.
        arrays: numpy arrays, one per argument of ``fn`` (made float64 Tensors on ``device``).
        device: the needle device to run on.
    Raises:
        AssertionError naming the input, the backward path and the largest difference.
    """
    expected = numerical_gradients(fn, arrays, device, eps=eps)
    for create_graph in (True, False, "graph"):
        actual = analytic_gradients(fn, arrays, device, create_graph)
        for i, (got, want) in enumerate(zip(actual, expected)):
            if got is None:
                assert not np.any(want), f"input {i} got no gradient (create_graph={create_graph})"
                continue
            if not np.allclose(got, want, rtol=rtol, atol=atol):
                worst = float(np.max(np.abs(got - want)))
                raise AssertionError(
                    f"gradient of input {i} (create_graph={create_graph}) differs from central "
                    f"differences by up to {worst:.3g}:\nanalytic:\n{got}\nnumerical:\n{want}"
                )
    return expected


def central_differences(loss, arrays, eps=1e-6):
    """Float64 central differences of a numpy function ``loss(*arrays) -> float``, per input.

    The oracle for references written in numpy (no needle inside), so that a test can check
    needle's gradients against a computation that shares none of its code.
    """
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    grads = []
    for array in arrays:
        grad = np.zeros_like(array)
        flat, grad_flat = array.reshape(-1), grad.reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = loss(*arrays)
            flat[i] = original - eps
            minus = loss(*arrays)
            flat[i] = original
            grad_flat[i] = (plus - minus) / (2 * eps)
        grads.append(grad)
    return grads
