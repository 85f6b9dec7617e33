/* The bookkeeping of every graph Value, in C: what needle/autograd.py's _fill and Value.__del__ do.
 *
 * Each Value a step makes costs its fields, the live counters and the hold of its array's
 * buffer when it is made, and the same undone when it is freed. In Python that is about 160
 * bytecodes a Value, and inside a training loop every bytecode shows (docs/benchmarks.md, "Where
 * the small-size gap is"). These two functions do the same work on the same state: the counters
 * stay autograd's module globals, the buffer tokens live_buffers' dict and lists, and the rare
 * cases (a view, a tuple, an unspent node freed, a graph keeper) call back into the Python
 * functions that own them. needle/value_bookkeeping.py installs them, or leaves the Python
 * versions where the extension is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Set once by configure(): autograd's globals and the objects the Python versions use. */
static PyObject *globals_dict;   /* autograd.__dict__: the counters and the data clock */
static PyObject *held;           /* live_buffers._HELD: id(owner) -> token */
static PyObject *bytes_by_device; /* live_buffers.BYTES_BY_DEVICE */
static PyObject *graph_keepers;  /* autograd.GRAPH_KEEPERS */
static PyObject *ndarray_class;  /* needle's NDArray */
static PyObject *numpy_array;    /* numpy.ndarray */
static PyObject *hold;           /* live_buffers.hold */
static PyObject *hold_all;       /* live_buffers.hold_all */
static PyObject *release;        /* live_buffers.release */
static PyObject *count_unspent;  /* autograd._count_unspent_freed */

static PyObject *s_op, *s_inputs, *s_cached_data, *s_requires_grad, *s_grad, *s_buffer, *s_spent;
static PyObject *s_data_set_at, *s_computed_at, *s_raw, *s_base, *s_nbytes, *s_device, *s_name;
static PyObject *one; /* the int 1 */
static PyObject *s_keep_recipe, *c_tensors, *c_values, *c_nodes, *c_freed, *c_spent_freed, *c_clock;

/* globals[name] += delta (an int). */
static int bump(PyObject *name, long delta)
{
    PyObject *now = PyDict_GetItemWithError(globals_dict, name);
    if (now == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_NameError, name);
        return -1;
    }
    PyObject *step = PyLong_FromLong(delta);
    if (step == NULL)
        return -1;
    PyObject *next = PyNumber_Add(now, step);
    Py_DECREF(step);
    if (next == NULL)
        return -1;
    int failed = PyDict_SetItem(globals_dict, name, next);
    Py_DECREF(next);
    return failed;
}

/* dict[key] += delta, or dict[key] = delta when absent (the bytes of a device). */
static int add_to(PyObject *dict, PyObject *key, PyObject *delta, int subtract)
{
    PyObject *now = PyDict_GetItemWithError(dict, key);
    if (now == NULL && PyErr_Occurred())
        return -1;
    PyObject *next;
    if (now == NULL) {
        if (subtract)
            return PyErr_SetObject(PyExc_KeyError, key), -1;
        next = Py_NewRef(delta);
    } else {
        next = subtract ? PyNumber_Subtract(now, delta) : PyNumber_Add(now, delta);
        if (next == NULL)
            return -1;
    }
    int failed = PyDict_SetItem(dict, key, next);
    Py_DECREF(next);
    return failed;
}

static int set(PyObject *value, PyObject *name, PyObject *item)
{
    return PyObject_SetAttr(value, name, item);
}

/* The live-buffer token of ``data`` (an NDArray), held once more: autograd._fill's inlined
 * case (a numpy array that owns its memory) here, any other through live_buffers.hold. */
static PyObject *hold_ndarray(PyObject *data)
{
    PyObject *raw = PyObject_GetAttr(data, s_raw);
    if (raw == NULL)
        return NULL;
    if (Py_TYPE(raw) != (PyTypeObject *)numpy_array) {
        Py_DECREF(raw);
        return PyObject_CallOneArg(hold, data);
    }
    PyObject *base = PyObject_GetAttr(raw, s_base);
    if (base == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    int owns = base == Py_None;
    Py_DECREF(base);
    if (!owns) {
        Py_DECREF(raw);
        return PyObject_CallOneArg(hold, data);
    }
    PyObject *key = PyLong_FromVoidPtr(raw);
    if (key == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    PyObject *token = PyDict_GetItemWithError(held, key);
    if (token != NULL) {
        PyObject *count = PyList_GET_ITEM(token, 0);
        PyObject *more = PyNumber_Add(count, one);
        Py_DECREF(key);
        Py_DECREF(raw);
        if (more == NULL)
            return NULL;
        PyList_SetItem(token, 0, more); /* steals more */
        return Py_NewRef(token);
    }
    if (PyErr_Occurred())
        goto fail_key;
    PyObject *nbytes = PyObject_GetAttr(raw, s_nbytes);
    if (nbytes == NULL)
        goto fail_key;
    PyObject *device = PyObject_GetAttr(data, s_device), *name = NULL;
    if (device != NULL) {
        name = PyObject_GetAttr(device, s_name);
        Py_DECREF(device);
    }
    if (name == NULL) {
        Py_DECREF(nbytes);
        goto fail_key;
    }
    token = PyList_New(4);
    if (token == NULL) {
        Py_DECREF(nbytes);
        Py_DECREF(name);
        goto fail_key;
    }
    PyList_SET_ITEM(token, 0, PyLong_FromLong(1));
    PyList_SET_ITEM(token, 1, Py_NewRef(nbytes));
    PyList_SET_ITEM(token, 2, Py_NewRef(name));
    PyList_SET_ITEM(token, 3, raw); /* the token keeps the owner: steals raw */
    int failed = PyList_GET_ITEM(token, 0) == NULL || PyDict_SetItem(held, key, token) != 0
                 || add_to(bytes_by_device, name, nbytes, 0) != 0;
    Py_DECREF(nbytes);
    Py_DECREF(name);
    Py_DECREF(key);
    if (failed) {
        Py_DECREF(token);
        return NULL;
    }
    return token;
fail_key:
    Py_DECREF(key);
    Py_DECREF(raw);
    return NULL;
}

/* fill(value, op, inputs, data, requires_grad): autograd._fill. */
static PyObject *fill(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "fill takes 5 arguments (%zd given)", nargs);
    PyObject *value = args[0], *op = args[1], *inputs = args[2], *data = args[3], *requires_grad = args[4];
    if (globals_dict == NULL)
        return PyErr_Format(PyExc_RuntimeError, "needle._value_bookkeeping is not configured");
    if (bump(c_tensors, 1) || bump(c_values, 1))
        return NULL;
    PyObject *clock = PyDict_GetItemWithError(globals_dict, c_clock);
    if (clock == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_NameError, c_clock);
        return NULL;
    }
    Py_INCREF(clock);
    int failed = set(value, s_data_set_at, clock);
    if (!failed && op != Py_None)
        failed = bump(c_nodes, 1) || set(value, s_computed_at, clock);
    Py_DECREF(clock);
    if (failed || set(value, s_op, op) || set(value, s_inputs, inputs) || set(value, s_requires_grad, requires_grad)
        || set(value, s_grad, Py_None) || set(value, s_spent, Py_False) || set(value, s_cached_data, data))
        return NULL;
    PyObject *token;
    if (data == Py_None)
        token = Py_NewRef(Py_None);
    else if (Py_TYPE(data) == (PyTypeObject *)ndarray_class)
        token = hold_ndarray(data);
    else
        token = PyObject_CallOneArg(hold_all, data);
    if (token == NULL)
        return NULL;
    failed = set(value, s_buffer, token);
    Py_DECREF(token);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* Let go of a buffer token, as Value.__del__ does: a list inline, anything else by live_buffers.release. */
static int release_token(PyObject *token)
{
    if (token == Py_None)
        return 0;
    if (!PyList_CheckExact(token) || PyList_GET_SIZE(token) != 4) {
        PyObject *result = PyObject_CallOneArg(release, token);
        Py_XDECREF(result);
        return result == NULL ? -1 : 0;
    }
    PyObject *less = PyNumber_Subtract(PyList_GET_ITEM(token, 0), one);
    if (less == NULL)
        return -1;
    int zero = PyObject_Not(less);
    PyList_SetItem(token, 0, less); /* steals less */
    if (zero <= 0)
        return zero; /* still held (0), or an error (-1) */
    PyObject *owner = PyList_GET_ITEM(token, 3);
    PyObject *key = PyLong_FromVoidPtr(owner);
    if (key == NULL)
        return -1;
    PyObject *popped = PyDict_GetItemWithError(held, key);
    int failed = 0;
    if (popped == token)
        failed = PyDict_DelItem(held, key);
    else if (popped == NULL && PyErr_Occurred())
        failed = -1;
    /* another thread's token for the key stays */
    Py_DECREF(key);
    if (failed)
        return -1;
    return add_to(bytes_by_device, PyList_GET_ITEM(token, 2), PyList_GET_ITEM(token, 1), 1);
}

/* release_value(value): Value.__del__'s body. */
static PyObject *release_value(PyObject *module, PyObject *value)
{
    if (globals_dict == NULL)
        Py_RETURN_NONE; /* interpreter shutdown, or never configured */
    PyObject *token = PyObject_GetAttr(value, s_buffer);
    if (token == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE; /* never initialised */
    }
    PyObject *op = NULL, *spent = NULL;
    int failed = bump(c_tensors, -1);
    if (!failed)
        op = PyObject_GetAttr(value, s_op);
    if (op == NULL)
        failed = 1;
    if (!failed && op != Py_None) {
        if (PyDict_GET_SIZE(graph_keepers)) {
            PyObject *key = PyLong_FromVoidPtr(value);
            PyObject *keeper = key == NULL ? NULL : PyDict_GetItemWithError(graph_keepers, key);
            if (keeper != NULL) {
                Py_INCREF(keeper);
                failed = PyDict_DelItem(graph_keepers, key);
                PyObject *graphs = failed ? NULL : PyObject_CallNoArgs(keeper);
                Py_DECREF(keeper);
                if (graphs == NULL)
                    failed = 1;
                else if (graphs != Py_None) {
                    PyObject *kept = PyObject_CallMethodOneArg(graphs, s_keep_recipe, value);
                    failed = kept == NULL;
                    Py_XDECREF(kept);
                }
                Py_XDECREF(graphs);
            } else if (key == NULL || PyErr_Occurred())
                failed = 1;
            Py_XDECREF(key);
        }
        failed = failed || bump(c_freed, 1);
        if (!failed)
            spent = PyObject_GetAttr(value, s_spent);
        if (spent == NULL)
            failed = 1;
        else if (spent == Py_True)
            failed = bump(c_spent_freed, 1);
        else if (spent == Py_False) {
            PyObject *requires = PyObject_GetAttr(value, s_requires_grad);
            int requires_grad = requires == NULL ? -1 : PyObject_IsTrue(requires);
            Py_XDECREF(requires);
            if (requires_grad < 0)
                failed = 1;
            else if (requires_grad) {
                PyObject *nbytes = PyList_CheckExact(token) && PyList_GET_SIZE(token) == 4
                                       ? Py_NewRef(PyList_GET_ITEM(token, 1)) : PyLong_FromLong(0);
                PyObject *result = nbytes == NULL ? NULL : PyObject_CallFunctionObjArgs(count_unspent, value, nbytes, NULL);
                Py_XDECREF(nbytes);
                failed = result == NULL;
                Py_XDECREF(result);
            }
        }
    }
    if (!failed)
        failed = release_token(token);
    Py_XDECREF(op);
    Py_XDECREF(spent);
    Py_DECREF(token);
    if (failed) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError) || PyErr_ExceptionMatches(PyExc_NameError)
            || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear(); /* as Value.__del__: interpreter shutdown */
            Py_RETURN_NONE;
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

/* configure(globals, held, bytes_by_device, graph_keepers, NDArray, numpy.ndarray, hold, hold_all,
 *           release, count_unspent_freed) */
static PyObject *configure(PyObject *module, PyObject *args)
{
    PyObject *objects[10];
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOOO:configure", &PyDict_Type, &objects[0], &PyDict_Type, &objects[1],
                          &PyDict_Type, &objects[2], &PyDict_Type, &objects[3], &objects[4], &objects[5],
                          &objects[6], &objects[7], &objects[8], &objects[9]))
        return NULL;
    PyObject **slots[10] = {&globals_dict, &held, &bytes_by_device, &graph_keepers, &ndarray_class,
                            &numpy_array, &hold, &hold_all, &release, &count_unspent};
    for (int i = 0; i < 10; i++) {
        PyObject *previous = *slots[i];
        *slots[i] = Py_NewRef(objects[i]);
        Py_XDECREF(previous);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(value, op, inputs, data, requires_grad): set a new Value's fields and count it (autograd._fill)."},
    {"release_value", release_value, METH_O, "release_value(value): Value.__del__'s bookkeeping."},
    {"configure", configure, METH_VARARGS, "configure(...): the state the two functions work on (value_bookkeeping.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_value_bookkeeping",
    "needle's per-Value bookkeeping in C (see needle/value_bookkeeping.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__value_bookkeeping(void)
{
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_op, "op"}, {&s_inputs, "inputs"}, {&s_cached_data, "cached_data"}, {&s_requires_grad, "requires_grad"},
        {&s_grad, "grad"}, {&s_buffer, "_buffer"}, {&s_spent, "_spent"}, {&s_data_set_at, "_data_set_at"},
        {&s_computed_at, "_computed_at"}, {&s_raw, "raw"}, {&s_base, "base"}, {&s_nbytes, "nbytes"},
        {&s_device, "device"}, {&s_name, "name"}, {&s_keep_recipe, "keep_recipe"},
        {&c_tensors, "TENSOR_COUNTER"}, {&c_values, "_VALUES_CREATED"}, {&c_nodes, "_NODES_CREATED"},
        {&c_freed, "_NODES_FREED"}, {&c_spent_freed, "_SPENT_FREED"}, {&c_clock, "_DATA_CLOCK"},
    };
    one = PyLong_FromLong(1);
    if (one == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (*names[i].slot == NULL)
            return NULL;
    }
    return PyModule_Create(&module_definition);
}
