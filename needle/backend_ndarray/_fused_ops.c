/* Softmax cross-entropy's and ReLU's multi-call numpy pieces, one pass each, with numpy's values.
 *
 * ArrayRoutines (kernels.py) writes these routines as numpy calls, several per piece. At the
 * benchmark's small batch each call costs more in dispatch than in arithmetic. Each function
 * here replaces one run of such calls with the same operations in the same order, each rounded
 * as numpy rounds it, so the values are bitwise those of the numpy calls:
 *
 *   shift_rows(shifted, logits)
 *       shifted = logits - logits.max(axis=1, keepdims=True)
 *   take_labels(row_losses, shifted, labels)
 *       row_losses -= shifted[arange(batch), labels]
 *   cross_entropy_gradient(exp_shifted, totals, labels, scale)
 *       exp_shifted *= scale / totals.reshape(batch, 1); exp_shifted[arange(batch), labels] -= scale
 *   relu_backward(result, out_grad, out)
 *       result = out_grad * (out > 0)
 *
 * Each returns True when it ran, and False, having changed nothing, for arrays it does not take:
 * not C-contiguous float32/float64 (labels: any integer type), another shape or dtype, a label
 * outside [0, classes), outputs sharing memory with inputs. The caller then makes the numpy
 * calls, which handle every other case and raise numpy's errors. The first arguments named
 * above are the ones written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_buffers.h"

/* ---- integer labels of any width ------------------------------------------------------------ */

enum { LABEL_U8, LABEL_I8, LABEL_U16, LABEL_I16, LABEL_U32, LABEL_I32, LABEL_U64, LABEL_I64, LABEL_UNSUPPORTED };

static int label_type(const Py_buffer *view)
{
    const char *format = native_format(view);
    if (strlen(format) != 1 || !strchr("bBhHiIlLqQnN", format[0]))
        return LABEL_UNSUPPORTED;
    const int is_signed = format[0] >= 'a' && format[0] <= 'z';
    switch (view->itemsize) {
    case 1: return is_signed ? LABEL_I8 : LABEL_U8;
    case 2: return is_signed ? LABEL_I16 : LABEL_U16;
    case 4: return is_signed ? LABEL_I32 : LABEL_U32;
    case 8: return is_signed ? LABEL_I64 : LABEL_U64;
    }
    return LABEL_UNSUPPORTED;
}

/* Label ``i`` as a class index, or -1 when it is outside [0, classes). */
static Py_ssize_t label_at(const void *labels, int type, Py_ssize_t i, Py_ssize_t classes)
{
    long long value;
    unsigned long long unsigned_value;
    switch (type) {
    case LABEL_U8: unsigned_value = ((const unsigned char *)labels)[i]; goto check_unsigned;
    case LABEL_U16: unsigned_value = ((const unsigned short *)labels)[i]; goto check_unsigned;
    case LABEL_U32: unsigned_value = ((const unsigned int *)labels)[i]; goto check_unsigned;
    case LABEL_U64: unsigned_value = ((const unsigned long long *)labels)[i]; goto check_unsigned;
    case LABEL_I8: value = ((const signed char *)labels)[i]; break;
    case LABEL_I16: value = ((const short *)labels)[i]; break;
    case LABEL_I32: value = ((const int *)labels)[i]; break;
    default: value = ((const long long *)labels)[i]; break;
    }
    return value >= 0 && value < classes ? (Py_ssize_t)value : -1;
check_unsigned:
    return unsigned_value < (unsigned long long)classes ? (Py_ssize_t)unsigned_value : -1;
}

/* The labels as indices into ``indices`` (``batch`` of them); 0 when one is out of range. */
static int read_labels(const Py_buffer *view, Py_ssize_t batch, Py_ssize_t classes, Py_ssize_t *indices)
{
    int type = label_type(view);
    if (type == LABEL_UNSUPPORTED || view->ndim != 1 || view->shape[0] != batch)
        return 0;
    for (Py_ssize_t i = 0; i < batch; i++) {
        indices[i] = label_at(view->buf, type, i, classes);
        if (indices[i] < 0)
            return 0;
    }
    return 1;
}

static int is_matrix(const Py_buffer *view) { return view->ndim == 2 && view->shape[0] > 0 && view->shape[1] > 0; }

static int same_shape(const Py_buffer *a, const Py_buffer *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* ---- shift_rows ----------------------------------------------------------------------------- */

/* numpy's max propagates a NaN (once ``largest`` is NaN no comparison replaces it) and, between
 * equal values, keeps the later one: the sign of a zero maximum is numpy's in short rows. */
#define SHIFT_ROWS_LOOP(T)                                                               \
    do {                                                                                 \
        T *restrict out = views[0].buf;                                                  \
        const T *restrict in = views[1].buf;                                             \
        for (Py_ssize_t r = 0; r < rows; r++) {                                          \
            const T *row = in + r * columns;                                             \
            T largest = row[0];                                                          \
            for (Py_ssize_t c = 1; c < columns; c++)                                     \
                if (row[c] >= largest || isnan(row[c]))                                  \
                    largest = isnan(largest) ? largest : row[c];                         \
            for (Py_ssize_t c = 0; c < columns; c++)                                     \
                out[r * columns + c] = row[c] - largest;                                 \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *shift_rows(PyObject *module, PyObject *args)
{
    PyObject *objects[2];
    if (!PyArg_ParseTuple(args, "OO:shift_rows", &objects[0], &objects[1]))
        return NULL;
    Py_buffer views[2];
    if (!acquire_all(objects, views, 2, 1))
        Py_RETURN_FALSE;
    int type = element_type(&views[0]);
    if (type == UNSUPPORTED || element_type(&views[1]) != type || !is_matrix(&views[1])
        || !same_shape(&views[0], &views[1]) || overlap(&views[0], &views[1])) {
        release(views, 2);
        Py_RETURN_FALSE;
    }
    const Py_ssize_t rows = views[1].shape[0], columns = views[1].shape[1];
    if (type == FLOAT32)
        SHIFT_ROWS_LOOP(float);
    else
        SHIFT_ROWS_LOOP(double);
    release(views, 2);
    Py_RETURN_TRUE;
}

/* ---- take_labels ---------------------------------------------------------------------------- */

static PyObject *take_labels(PyObject *module, PyObject *args)
{
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, "OOO:take_labels", &objects[0], &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (!acquire_all(objects, views, 3, 1))
        Py_RETURN_FALSE;
    int type = element_type(&views[0]);
    Py_ssize_t *indices = NULL;
    int ok = type != UNSUPPORTED && element_type(&views[1]) == type && is_matrix(&views[1])
             && views[0].ndim == 1 && views[0].shape[0] == views[1].shape[0]
             && !overlap(&views[0], &views[1]) && !overlap(&views[0], &views[2]);
    const Py_ssize_t rows = ok ? views[1].shape[0] : 0, columns = ok ? views[1].shape[1] : 0;
    if (ok) {
        indices = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)rows);
        ok = indices != NULL && read_labels(&views[2], rows, columns, indices);
    }
    if (ok) {
        if (type == FLOAT32) {
            float *losses = views[0].buf;
            const float *shifted = views[1].buf;
            for (Py_ssize_t r = 0; r < rows; r++)
                losses[r] = losses[r] - shifted[r * columns + indices[r]];
        } else {
            double *losses = views[0].buf;
            const double *shifted = views[1].buf;
            for (Py_ssize_t r = 0; r < rows; r++)
                losses[r] = losses[r] - shifted[r * columns + indices[r]];
        }
    }
    PyMem_Free(indices);
    release(views, 3);
    return PyBool_FromLong(ok);
}

/* ---- cross_entropy_gradient ----------------------------------------------------------------- */

#define GRADIENT_LOOP(T)                                                                 \
    do {                                                                                 \
        T *values = views[0].buf;                                                        \
        const T *totals = views[1].buf;                                                  \
        const T scale = *(const T *)views[3].buf;                                        \
        for (Py_ssize_t r = 0; r < rows; r++) {                                          \
            const T factor = scale / totals[r];                                          \
            T *row = values + r * columns;                                               \
            for (Py_ssize_t c = 0; c < columns; c++)                                     \
                row[c] = row[c] * factor;                                                \
            row[indices[r]] = row[indices[r]] - scale;                                   \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *cross_entropy_gradient(PyObject *module, PyObject *args)
{
    PyObject *objects[4];
    if (!PyArg_ParseTuple(args, "OOOO:cross_entropy_gradient", &objects[0], &objects[1], &objects[2], &objects[3]))
        return NULL;
    Py_buffer views[4];
    if (!acquire_all(objects, views, 4, 1))
        Py_RETURN_FALSE;
    int type = element_type(&views[0]);
    Py_ssize_t *indices = NULL;
    int ok = type != UNSUPPORTED && is_matrix(&views[0]) && element_type(&views[1]) == type
             && element_type(&views[3]) == type && views[3].len == views[3].itemsize
             && views[1].ndim == 1 && views[1].shape[0] == views[0].shape[0];
    for (int i = 1; ok && i < 4; i++)
        ok = !overlap(&views[0], &views[i]);
    const Py_ssize_t rows = ok ? views[0].shape[0] : 0, columns = ok ? views[0].shape[1] : 0;
    if (ok) {
        indices = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)rows);
        ok = indices != NULL && read_labels(&views[2], rows, columns, indices);
    }
    if (ok) {
        if (type == FLOAT32)
            GRADIENT_LOOP(float);
        else
            GRADIENT_LOOP(double);
    }
    PyMem_Free(indices);
    release(views, 4);
    return PyBool_FromLong(ok);
}

/* ---- relu_backward -------------------------------------------------------------------------- */

/* numpy multiplies by the mask cast to the float type: 1 keeps the value (a NaN too), 0 makes
 * +-0, or NaN for an infinite or NaN gradient. */
#define RELU_BACKWARD_LOOP(T)                                                            \
    do {                                                                                 \
        T *restrict result = views[0].buf;                                               \
        const T *restrict gradient = views[1].buf, *restrict out = views[2].buf;         \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            const T mask = out[i] > (T)0 ? (T)1 : (T)0;                                  \
            result[i] = gradient[i] * mask;                                              \
        }                                                                                \
    } while (0)

VECTORIZED static PyObject *relu_backward(PyObject *module, PyObject *args)
{
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, "OOO:relu_backward", &objects[0], &objects[1], &objects[2]))
        return NULL;
    Py_buffer views[3];
    if (!acquire_all(objects, views, 3, 1))
        Py_RETURN_FALSE;
    int type = element_type(&views[0]);
    int ok = type != UNSUPPORTED && element_type(&views[1]) == type && element_type(&views[2]) == type
             && same_shape(&views[0], &views[1]) && same_shape(&views[0], &views[2])
             && !overlap(&views[0], &views[1]) && !overlap(&views[0], &views[2]);
    if (ok) {
        const Py_ssize_t n = views[0].len / views[0].itemsize;
        if (type == FLOAT32)
            RELU_BACKWARD_LOOP(float);
        else
            RELU_BACKWARD_LOOP(double);
    }
    release(views, 3);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"shift_rows", shift_rows, METH_VARARGS,
     "shift_rows(shifted, logits) -> bool\n\nshifted = logits - logits.max(axis=1, keepdims=True), numpy's values;\n"
     "False (nothing changed) for arrays it does not take."},
    {"take_labels", take_labels, METH_VARARGS,
     "take_labels(row_losses, shifted, labels) -> bool\n\nrow_losses -= shifted[arange(batch), labels];\n"
     "False (nothing changed) for a label outside [0, classes) or arrays it does not take."},
    {"cross_entropy_gradient", cross_entropy_gradient, METH_VARARGS,
     "cross_entropy_gradient(exp_shifted, totals, labels, scale) -> bool\n\n"
     "exp_shifted *= scale / totals[:, None]; exp_shifted[arange(batch), labels] -= scale;\n"
     "False (nothing changed) for a label outside [0, classes) or arrays it does not take."},
    {"relu_backward", relu_backward, METH_VARARGS,
     "relu_backward(result, out_grad, out) -> bool\n\nresult = out_grad * (out > 0); False (nothing changed)\n"
     "for arrays it does not take."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fused_ops_module = {
    PyModuleDef_HEAD_INIT, "_fused_ops",
    "Softmax cross-entropy's and ReLU's numpy pieces in one pass each (see needle/backend_ndarray/fused_ops.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fused_ops(void)
{
    return PyModule_Create(&fused_ops_module);
}
