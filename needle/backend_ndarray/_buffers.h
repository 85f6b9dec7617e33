/* What needle's C extensions share: reading numpy arrays through the buffer protocol.
 *
 * Each extension takes the arrays a numpy routine would take and refuses (returns False,
 * changing nothing) any it does not handle, so that the caller runs the numpy calls instead.
 */
#ifndef NEEDLE_BUFFERS_H
#define NEEDLE_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

enum { FLOAT32, FLOAT64, UNSUPPORTED };

/* VECTORIZED, before a function whose loops the compiler vectorizes: one copy of it per
 * instruction set, the widest the CPU has chosen when the module loads (x86-64 Linux with
 * GCC or clang; elsewhere one copy). Built for the baseline x86-64 alone, a loop runs four
 * floats a step (SSE2); with AVX2 eight, with AVX-512 sixteen. The values do not change: each
 * operation is the same IEEE operation on more elements at once, and -ffp-contract=off keeps
 * every copy free of fused multiply-adds. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VECTORIZED
#define VECTORIZED
#endif

/* A buffer's struct format without its byte-order prefix when that order is the native one
 * (a format in the other order keeps its prefix, so callers refuse it). */
static const char *native_format(const Py_buffer *view)
{
    const char *format = view->format ? view->format : "B";
    const int little_endian = *(const unsigned char *)&(const unsigned short){1} == 1;
    if (format[0] == '=' || format[0] == '@' || format[0] == (little_endian ? '<' : '>'))
        format++;
    return format;
}

static int element_type(const Py_buffer *view)
{
    const char *format = native_format(view);
    if (strcmp(format, "f") == 0 && view->itemsize == 4)
        return FLOAT32;
    if (strcmp(format, "d") == 0 && view->itemsize == 8)
        return FLOAT64;
    return UNSUPPORTED;
}

static int overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *a_start = a->buf, *b_start = b->buf;
    return a_start < b_start + b->len && b_start < a_start + a->len;
}

/* Acquire ``count`` C-contiguous buffers (the first ``writable`` of them writable): 1 when all
 * were, else 0 with none held (and no Python error set). */
static int acquire_all(PyObject **objects, Py_buffer *views, int count, int writable)
{
    for (int held = 0; held < count; held++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (held < writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) != 0) {
            PyErr_Clear();
            while (held > 0)
                PyBuffer_Release(&views[--held]);
            return 0;
        }
    }
    return 1;
}

static void release(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

#endif
