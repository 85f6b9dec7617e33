/* The calling thread's denormal mode: flush subnormal floats to zero, or keep them (IEEE).
 *
 * x86-64: the SSE control register MXCSR, bits FTZ (results that would be subnormal become
 * zero) and DAZ (subnormal inputs are read as zero). AArch64: FPCR bit FZ, which does both.
 * numpy's arithmetic and a single-threaded BLAS run in the calling thread, so they follow it.
 * Elsewhere the module reports that flushing is unsupported. See needle/denormals.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
#define FLUSH_BITS 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
static int supported(void) { return 1; }
static unsigned int read_mode(void) { return _mm_getcsr(); }
static void write_mode(unsigned int mode) { _mm_setcsr(mode); }
#elif defined(__aarch64__)
#define FLUSH_BITS (1u << 24) /* FPCR.FZ */
static int supported(void) { return 1; }
static unsigned int read_mode(void)
{
    unsigned long long fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    return (unsigned int)fpcr;
}
static void write_mode(unsigned int mode)
{
    unsigned long long fpcr = mode;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
}
#else
#define FLUSH_BITS 0u
static int supported(void) { return 0; }
static unsigned int read_mode(void) { return 0; }
static void write_mode(unsigned int mode) { (void)mode; }
#endif

static PyObject *set_flush(PyObject *module, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    if (!supported())
        Py_RETURN_FALSE;
    unsigned int mode = read_mode();
    write_mode(on ? (mode | FLUSH_BITS) : (mode & ~FLUSH_BITS));
    Py_RETURN_TRUE;
}

static PyObject *flushing(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(supported() && (read_mode() & FLUSH_BITS) == FLUSH_BITS);
}

static PyObject *is_supported(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(supported());
}

static PyMethodDef methods[] = {
    {"set_flush", set_flush, METH_O,
     "set_flush(on) -> bool\n\nFlush subnormal floats to zero in the calling thread (on) or keep them (off);\n"
     "False, changing nothing, where this CPU is not supported."},
    {"flushing", flushing, METH_NOARGS, "flushing() -> bool\n\nWhether the calling thread flushes subnormal floats."},
    {"supported", is_supported, METH_NOARGS, "supported() -> bool\n\nWhether this CPU's mode can be set here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef denormals_module = {
    PyModuleDef_HEAD_INIT, "_denormals",
    "The calling thread's denormal mode (see needle/denormals.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__denormals(void)
{
    return PyModule_Create(&denormals_module);
}
