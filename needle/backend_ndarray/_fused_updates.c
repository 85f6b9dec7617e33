/* The SGD updates as one pass over the arrays: the same arithmetic as needle's numpy calls.
 *
 * ArrayRoutines (kernels.py) writes an update as in-place numpy calls, one pass over the
 * weight-sized arrays each: momentum SGD is four or five such passes. Here each element is
 * loaded once and every operation is rounded as the numpy call rounds it, in the same order
 * (built with -ffp-contract=off: no fused multiply-add), so the values are bitwise those of
 * the numpy calls; only the memory traffic and the Python calls go.
 *
 * Adam likewise replaces the eleven calls of ArrayRoutines.adam_steps.
 *
 * Each also takes an optional ``source``: the weight's values are then read from it and the
 * updated ones written into ``weight``, an update out of place (see needle/weight_handover.py).
 *
 * Every function takes the arrays through the buffer protocol and returns False, having
 * changed nothing, when one is not a writable (where written) C-contiguous float32 or float64
 * buffer of the weight's size, or when two of them share memory: the caller then runs the
 * numpy calls, which handle every other case. CuPy arrays export no buffer, so they fall back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_buffers.h"

/* Acquire ``count`` buffers (the first ``writable`` of them writable); 1 when all are usable
 * alike (one element type, one size, no shared memory), else 0 with none held. */
static int acquire(PyObject **objects, Py_buffer *views, int count, int writable, int *type)
{
    if (!acquire_all(objects, views, count, writable))
        return 0;
    *type = element_type(&views[0]);
    if (*type == UNSUPPORTED)
        goto refuse;
    for (int i = 1; i < count; i++) {
        if (element_type(&views[i]) != *type || views[i].len != views[0].len)
            goto refuse;
        for (int j = 0; j < i; j++)
            if (overlap(&views[i], &views[j]))
                goto refuse;
    }
    return 1;
refuse:
    release(views, count);
    return 0;
}

/* velocity = momentum * velocity + gradient (+ weight_decay * weight); weight -= step * velocity.
 * The numpy calls it replaces: velocity *= momentum; velocity += gradient;
 * velocity += weight * weight_decay (when weight_decay); weight -= velocity * step. */
#define MOMENTUM_LOOP(T)                                                                 \
    do {                                                                                 \
        T *w = views[0].buf, *v = views[1].buf;                                          \
        const T *g = views[2].buf, *w0 = source_view ? source_view->buf : w;             \
        const T m = (T)momentum, s = (T)step, d = (T)weight_decay;                       \
        Py_ssize_t n = views[0].len / (Py_ssize_t)sizeof(T);                             \
        if (weight_decay != 0.0) {                                                       \
            for (Py_ssize_t i = 0; i < n; i++) {                                         \
                T u = v[i] * m;                                                          \
                u = u + g[i];                                                            \
                u = u + w0[i] * d;                                                       \
                v[i] = u;                                                                \
                w[i] = w0[i] - u * s;                                                    \
            }                                                                            \
        } else {                                                                         \
            for (Py_ssize_t i = 0; i < n; i++) {                                         \
                T u = v[i] * m;                                                          \
                u = u + g[i];                                                            \
                v[i] = u;                                                                \
                w[i] = w0[i] - u * s;                                                    \
            }                                                                            \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *momentum_step(PyObject *module, PyObject *args)
{
    PyObject *objects[4] = {NULL, NULL, NULL, Py_None};
    double momentum, step, weight_decay;
    if (!PyArg_ParseTuple(args, "OOOddd|O:momentum_step", &objects[0], &objects[1], &objects[2],
                          &momentum, &step, &weight_decay, &objects[3]))
        return NULL;
    int count = objects[3] == Py_None ? 3 : 4;
    Py_buffer views[4];
    int type;
    if (!acquire(objects, views, count, 2, &type))
        Py_RETURN_FALSE;
    const Py_buffer *source_view = count == 4 ? &views[3] : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (type == FLOAT32)
        MOMENTUM_LOOP(float);
    else
        MOMENTUM_LOOP(double);
    Py_END_ALLOW_THREADS
    release(views, count);
    Py_RETURN_TRUE;
}

/* weight -= lr * (gradient + weight_decay * weight). The numpy calls it replaces: weight -= gradient * lr
 * without weight decay; with it, t = weight * weight_decay; t += gradient; t *= lr; weight -= t. */
#define SGD_LOOP(T)                                                                      \
    do {                                                                                 \
        T *w = views[0].buf;                                                             \
        const T *g = views[1].buf, *w0 = source_view ? source_view->buf : w;             \
        const T r = (T)lr, d = (T)weight_decay;                                          \
        Py_ssize_t n = views[0].len / (Py_ssize_t)sizeof(T);                             \
        if (weight_decay != 0.0) {                                                       \
            for (Py_ssize_t i = 0; i < n; i++) {                                         \
                T t = w0[i] * d;                                                         \
                t = t + g[i];                                                            \
                t = t * r;                                                               \
                w[i] = w0[i] - t;                                                        \
            }                                                                            \
        } else {                                                                         \
            for (Py_ssize_t i = 0; i < n; i++)                                           \
                w[i] = w0[i] - g[i] * r;                                                 \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *sgd_step(PyObject *module, PyObject *args)
{
    PyObject *objects[3] = {NULL, NULL, Py_None};
    double lr, weight_decay;
    if (!PyArg_ParseTuple(args, "OOdd|O:sgd_step", &objects[0], &objects[1], &lr, &weight_decay, &objects[2]))
        return NULL;
    int count = objects[2] == Py_None ? 2 : 3;
    Py_buffer views[3];
    int type;
    if (!acquire(objects, views, count, 1, &type))
        Py_RETURN_FALSE;
    const Py_buffer *source_view = count == 3 ? &views[2] : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (type == FLOAT32)
        SGD_LOOP(float);
    else
        SGD_LOOP(double);
    Py_END_ALLOW_THREADS
    release(views, count);
    Py_RETURN_TRUE;
}

/* One Adam update, the calls of ArrayRoutines.adam_steps in their order:
 * gradient = gradient + weight_decay * weight (when weight_decay);
 * first = first * beta1 + gradient * (1 - beta1); second = second * beta2 + (gradient * gradient) * (1 - beta2);
 * weight -= first / (sqrt(second) * inverse_sqrt_c2 + eps) * step_size. */
#define ADAM_LOOP(T, SQRT)                                                               \
    do {                                                                                 \
        T *w = views[0].buf, *m = views[1].buf, *v = views[2].buf;                       \
        const T *g = views[3].buf, *w0 = source_view ? source_view->buf : w;             \
        const T b1 = (T)beta1, k1 = (T)one_minus_beta1, b2 = (T)beta2;                   \
        const T k2 = (T)one_minus_beta2, c = (T)inverse_sqrt_c2, e = (T)eps;             \
        const T a = (T)step_size, d = (T)weight_decay;                                   \
        Py_ssize_t n = views[0].len / (Py_ssize_t)sizeof(T);                             \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            T grad = g[i];                                                               \
            if (weight_decay != 0.0)                                                     \
                grad = grad + w0[i] * d;                                                 \
            T first = m[i] * b1;                                                         \
            first = first + grad * k1;                                                   \
            T square = grad * grad;                                                      \
            square = square * k2;                                                        \
            T second = v[i] * b2;                                                        \
            second = second + square;                                                    \
            T denominator = SQRT(second);                                                \
            denominator = denominator * c;                                               \
            denominator = denominator + e;                                               \
            T change = first / denominator;                                              \
            change = change * a;                                                         \
            m[i] = first;                                                                \
            v[i] = second;                                                               \
            w[i] = w0[i] - change;                                                       \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *adam_step(PyObject *module, PyObject *args)
{
    PyObject *objects[5] = {NULL, NULL, NULL, NULL, Py_None};
    double beta1, one_minus_beta1, beta2, one_minus_beta2, inverse_sqrt_c2, eps, step_size, weight_decay;
    if (!PyArg_ParseTuple(args, "OOOOdddddddd|O:adam_step", &objects[0], &objects[1], &objects[2], &objects[3],
                          &beta1, &one_minus_beta1, &beta2, &one_minus_beta2, &inverse_sqrt_c2, &eps,
                          &step_size, &weight_decay, &objects[4]))
        return NULL;
    int count = objects[4] == Py_None ? 4 : 5;
    Py_buffer views[5];
    int type;
    if (!acquire(objects, views, count, 3, &type))
        Py_RETURN_FALSE;
    const Py_buffer *source_view = count == 5 ? &views[4] : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (type == FLOAT32)
        ADAM_LOOP(float, sqrtf);
    else
        ADAM_LOOP(double, sqrt);
    Py_END_ALLOW_THREADS
    release(views, count);
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"momentum_step", momentum_step, METH_VARARGS,
     "momentum_step(weight, velocity, gradient, momentum, step, weight_decay[, source]) -> bool\n\n"
     "velocity = momentum * velocity + gradient + weight_decay * weight; weight -= step * velocity,\n"
     "in one pass, rounded as the numpy calls round it. With source, the weight's values are read\n"
     "from source and the result written into weight (which source keeps unchanged). False (nothing\n"
     "changed) when an array is not a C-contiguous float32/float64 buffer of the weight's size, or two\n"
     "share memory."},
    {"sgd_step", sgd_step, METH_VARARGS,
     "sgd_step(weight, gradient, lr, weight_decay[, source]) -> bool\n\n"
     "weight -= lr * (gradient + weight_decay * weight) in one pass, rounded as the numpy calls\n"
     "round it; False as momentum_step."},
    {"adam_step", adam_step, METH_VARARGS,
     "adam_step(weight, first, second, gradient, beta1, 1 - beta1, beta2, 1 - beta2, inverse_sqrt_c2,\n"
     "          eps, step_size, weight_decay[, source]) -> bool\n\n"
     "One Adam update in one pass, rounded as ArrayRoutines.adam_steps's numpy calls round it;\n"
     "False as momentum_step."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fused_updates_module = {
    PyModuleDef_HEAD_INIT, "_fused_updates",
    "needle's SGD updates as one pass over the arrays (see needle/backend_ndarray/fused_updates.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fused_updates(void)
{
    return PyModule_Create(&fused_updates_module);
}
