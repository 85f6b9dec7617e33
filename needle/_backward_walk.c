/* The fast backward pass's walk over the graph, in C: the same order, the same checks and the
 * same calls as the Python in needle/backward.py, without the interpreter's cost per node.
 *
 * - checked_order(root, prune_constants) is ``_checked_nodes``: the post-order depth-first
 *   search, with the data-clock check of each graph node as it is entered. It returns
 *   ``(order, stale, plain)``: ``stale`` is the first node found computed from changed data
 *   (None when there is none; the caller raises, naming it), ``plain`` whether every node
 *   holds one NDArray (no TensorTuple, no lazy node without data), which gradient_pass needs.
 * - gradient_pass(order, output, out_grad, make_leaf_grad, add_grads, cast_arriving) is the
 *   loop of ``compute_gradient_data`` over such a graph: each node's gradient, taken out of
 *   the table of gradients, goes through its op's ``gradient_data``; leaves get
 *   ``make_leaf_grad(grad)``. A gradient of another dtype than its node goes to
 *   ``cast_arriving(node, grad)`` (None: the node takes no gradient).
 *
 * - course_pass(order, output, out_grad, add_grads, cast_arriving, takes_constant_gradient) is
 *   the loop of ``compute_gradient_of_variables`` (the course's ``backward()``) over such a
 *   graph: every node's gradient, constants' included (through the op's
 *   ``constant_input_gradients``), returned as ``[(node, grad)]`` in the order they arrive; the
 *   caller makes the ``.grad`` Tensors.
 *
 * - leaves_requiring_grad(order) and assign_course_grads(arrived, ...) are the loops of
 *   ``compute_gradient_of_variables`` before and after course_pass: the leaves its gradient
 *   graphs depend on, and each node's ``.grad`` made from its arriving gradient (by the given
 *   Python callables) and written once all are made.
 *
 * - count_spent(nodes, updaters) is the loop of ``autograd._count_backward_call``: it marks the
 *   traversed graph nodes spent and counts frozen parameters.
 *
 * Every attribute reads what Python would read (Value's slots in place, a subclass's property
 * through getattr), and every sum of two gradients is ``add_grads``: the values, and the order they are summed in,
 * are those of the Python loops. needle/backward.py uses this module when it was built (it
 * is optional, see setup.py); tests/test_backward_walk.py holds the two to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

static PyObject *ndarray_type; /* needle's NDArray class, given by configure() */
static PyObject *s_op, *s_inputs, *s_computed_at, *s_data_set_at, *s_requires_grad;
static PyObject *s_cached_data, *s_raw, *s_dtype, *s_gradient_data, *s_grad, *s_item_gradient;
static PyObject *s_constant_input_gradients, *s_spent, *s_is_parameter;

/* Value's slots (and NDArray's ``raw``), read in place: the member descriptor of each name and
 * its offset, found by configure(). An object whose class finds another attribute under that
 * name (a property of a subclass) is read through getattr. */
enum { OP, INPUTS, COMPUTED_AT, DATA_SET_AT, REQUIRES_GRAD, CACHED_DATA, SPENT, RAW, SLOT_COUNT };
#define VALUE_SLOTS RAW /* the slots before RAW are Value's; RAW is NDArray's */
static PyObject *slot_names[SLOT_COUNT];
static PyObject *slot_descriptors[SLOT_COUNT];
static Py_ssize_t slot_offsets[SLOT_COUNT];

/* ``obj.<slot>`` (a new reference), as getattr reads it. */
static PyObject *read_slot(PyObject *obj, int slot)
{
    PyObject *descriptor = slot_descriptors[slot];
    if (descriptor != NULL && _PyType_Lookup(Py_TYPE(obj), slot_names[slot]) == descriptor) {
        PyObject *value = *(PyObject **)((char *)obj + slot_offsets[slot]);
        if (value != NULL) {
            Py_INCREF(value);
            return value;
        }
    }
    return PyObject_GetAttr(obj, slot_names[slot]); /* a property, or an unset slot's AttributeError */
}

/* 1 when ``obj.<slot>`` is true, 0 when false, -1 on error. */
static int attribute_is_true(PyObject *obj, int slot)
{
    PyObject *value = read_slot(obj, slot);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* 1 when ``a.<slot> op b``, 0 when not, -1 on error. */
static int compare_attribute(PyObject *a, int slot, PyObject *b, int op)
{
    PyObject *value = read_slot(a, slot);
    if (value == NULL)
        return -1;
    int result = PyObject_RichCompareBool(value, b, op);
    Py_DECREF(value);
    return result;
}

/* ``obj.<slot> = value``, in place where read_slot reads in place; 0, or -1 on error. */
static int write_slot(PyObject *obj, int slot, PyObject *value)
{
    PyObject *descriptor = slot_descriptors[slot];
    if (descriptor != NULL && _PyType_Lookup(Py_TYPE(obj), slot_names[slot]) == descriptor) {
        PyObject **place = (PyObject **)((char *)obj + slot_offsets[slot]);
        Py_INCREF(value);
        Py_XSETREF(*place, value);
        return 0;
    }
    return PyObject_SetAttr(obj, slot_names[slot], value);
}

/* Whether ``node`` holds one NDArray (1), or not (0); -1 on error. */
static int holds_one_array(PyObject *node)
{
    PyObject *data = read_slot(node, CACHED_DATA);
    if (data == NULL)
        return -1;
    int plain = (PyObject *)Py_TYPE(data) == ndarray_type;
    Py_DECREF(data);
    return plain;
}

/* configure(NDArray, Value): the array class, and the class whose slots are read in place. */
static PyObject *configure(PyObject *module, PyObject *args)
{
    PyObject *ndarray, *value_type;
    if (!PyArg_ParseTuple(args, "O!O!:configure", &PyType_Type, &ndarray, &PyType_Type, &value_type))
        return NULL;
    for (int slot = 0; slot < SLOT_COUNT; slot++) {
        PyTypeObject *owner = (PyTypeObject *)(slot < VALUE_SLOTS ? value_type : ndarray);
        PyObject *descriptor = _PyType_Lookup(owner, slot_names[slot]);
        Py_CLEAR(slot_descriptors[slot]);
        if (descriptor != NULL && Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
            if (member->type == T_OBJECT_EX) {
                Py_INCREF(descriptor);
                slot_descriptors[slot] = descriptor;
                slot_offsets[slot] = member->offset;
            }
        }
    }
    Py_INCREF(ndarray);
    Py_XSETREF(ndarray_type, ndarray);
    Py_RETURN_NONE;
}

/* The stack of the search: nodes (each held) and whether each was expanded. */
typedef struct {
    PyObject **nodes;
    char *expanded;
    Py_ssize_t size, capacity;
} Stack;

static int stack_init(Stack *stack)
{
    stack->size = 0;
    stack->capacity = 32;
    stack->nodes = PyMem_Malloc(sizeof(PyObject *) * (size_t)stack->capacity);
    stack->expanded = PyMem_Malloc((size_t)stack->capacity);
    if (stack->nodes == NULL || stack->expanded == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void stack_free(Stack *stack)
{
    for (Py_ssize_t i = 0; i < stack->size; i++)
        Py_DECREF(stack->nodes[i]);
    PyMem_Free(stack->nodes);
    PyMem_Free(stack->expanded);
}

static int stack_push(Stack *stack, PyObject *node, char expanded)
{
    if (stack->size == stack->capacity) {
        Py_ssize_t capacity = stack->capacity * 2;
        PyObject **nodes = PyMem_Realloc(stack->nodes, sizeof(PyObject *) * (size_t)capacity);
        if (nodes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        stack->nodes = nodes;
        char *flags = PyMem_Realloc(stack->expanded, (size_t)capacity);
        if (flags == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        stack->expanded = flags;
        stack->capacity = capacity;
    }
    Py_INCREF(node);
    stack->nodes[stack->size] = node;
    stack->expanded[stack->size] = expanded;
    stack->size++;
    return 0;
}

/* Pop the top node (the caller owns the reference) and its flag. */
static PyObject *stack_pop(Stack *stack, char *expanded)
{
    stack->size--;
    *expanded = stack->expanded[stack->size];
    return stack->nodes[stack->size];
}

/* ``node.inputs`` as a PySequence_Fast (a new reference), or NULL with the error set. */
static PyObject *inputs_of(PyObject *node)
{
    PyObject *inputs = read_slot(node, INPUTS);
    if (inputs == NULL)
        return NULL;
    PyObject *sequence = PySequence_Fast(inputs, "a node's inputs must be a sequence");
    Py_DECREF(inputs);
    return sequence;
}

/* Push ``node``'s inputs, last first, and note whether one of them changed after ``computed_at``. */
static int push_inputs(Stack *stack, PyObject *node, PyObject *computed_at, PyObject *visited,
                       int prune_constants, int *stale)
{
    PyObject *sequence = inputs_of(node);
    if (sequence == NULL)
        return -1;
    int status = 0;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(sequence) - 1; i >= 0; i--) {
        PyObject *x = PySequence_Fast_GET_ITEM(sequence, i);
        int changed = compare_attribute(x, DATA_SET_AT, computed_at, Py_GT);
        if (changed < 0)
            goto fail;
        if (changed)
            *stale = 1;
        int wanted = 1;
        if (prune_constants) {
            wanted = attribute_is_true(x, REQUIRES_GRAD);
            if (wanted < 0)
                goto fail;
        }
        if (!wanted)
            continue;
        int seen = PySet_Contains(visited, x);
        if (seen < 0)
            goto fail;
        if (!seen && stack_push(stack, x, 0) < 0)
            goto fail;
    }
    goto done;
fail:
    status = -1;
done:
    Py_DECREF(sequence);
    return status;
}

/* Whether ``op`` reads one item of a tuple (its class defines ``item_gradient``): such a node
 * goes through the Python loop, which keeps those gradients sparse. */
static int reads_a_tuple_item(PyObject *op)
{
    return _PyType_Lookup(Py_TYPE(op), s_item_gradient) != NULL;
}

static PyObject *checked_order(PyObject *module, PyObject *args)
{
    PyObject *root;
    int prune_constants;
    if (!PyArg_ParseTuple(args, "Op:checked_order", &root, &prune_constants))
        return NULL;
    if (ndarray_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_backward_walk.configure(NDArray) was not called");
        return NULL;
    }
    Stack stack;
    PyObject *order = PyList_New(0), *visited = PySet_New(NULL);
    PyObject *stale_node = NULL, *node = NULL;
    int plain = 1;
    if (stack_init(&stack) < 0 || order == NULL || visited == NULL || stack_push(&stack, root, 0) < 0)
        goto fail;
    while (stack.size > 0) {
        char expanded;
        node = stack_pop(&stack, &expanded);
        if (expanded) {
            if (PyList_Append(order, node) < 0)
                goto fail;
            Py_CLEAR(node);
            continue;
        }
        int seen = PySet_Contains(visited, node);
        if (seen < 0)
            goto fail;
        if (seen) {
            Py_CLEAR(node);
            continue;
        }
        if (PySet_Add(visited, node) < 0)
            goto fail;
        if (plain) {
            int one_array = holds_one_array(node);
            if (one_array < 0)
                goto fail;
            plain = one_array;
        }
        PyObject *op = read_slot(node, OP);
        if (op == NULL)
            goto fail;
        int leaf = op == Py_None;
        if (!leaf && plain && reads_a_tuple_item(op))
            plain = 0;
        Py_DECREF(op);
        if (leaf) {
            if (PyList_Append(order, node) < 0)
                goto fail;
            Py_CLEAR(node);
            continue;
        }
        PyObject *computed_at = read_slot(node, COMPUTED_AT);
        if (computed_at == NULL)
            goto fail;
        int stale = compare_attribute(node, DATA_SET_AT, computed_at, Py_NE);
        if (stale < 0 || stack_push(&stack, node, 1) < 0 ||
            push_inputs(&stack, node, computed_at, visited, prune_constants, &stale) < 0) {
            Py_DECREF(computed_at);
            goto fail;
        }
        Py_DECREF(computed_at);
        if (stale) {
            stale_node = node; /* the caller raises, naming it */
            node = NULL;
            break;
        }
        Py_CLEAR(node);
    }
    Py_DECREF(visited);
    stack_free(&stack);
    PyObject *result = Py_BuildValue("(NOO)", order, stale_node ? stale_node : Py_None, plain ? Py_True : Py_False);
    Py_XDECREF(stale_node);
    return result;
fail:
    Py_XDECREF(node);
    Py_XDECREF(order);
    Py_XDECREF(visited);
    stack_free(&stack);
    return NULL;
}

/* The dtype of a gradient: ``grad.raw.dtype`` for an NDArray, else ``grad.dtype`` (new reference). */
static PyObject *dtype_of(PyObject *grad)
{
    if ((PyObject *)Py_TYPE(grad) != ndarray_type)
        return PyObject_GetAttr(grad, s_dtype);
    PyObject *raw = read_slot(grad, RAW);
    if (raw == NULL)
        return NULL;
    PyObject *dtype = PyObject_GetAttr(raw, s_dtype);
    Py_DECREF(raw);
    return dtype;
}

/* The gradient ``grad`` (stolen) as it arrives at ``node``: cast by ``cast_arriving`` when its
 * dtype is not the node's; NULL with no error set when the node takes none. */
static PyObject *arriving(PyObject *node, PyObject *grad, PyObject *cast_arriving)
{
    PyObject *data = read_slot(node, CACHED_DATA);
    PyObject *node_dtype = data == NULL ? NULL : dtype_of(data);
    Py_XDECREF(data);
    PyObject *grad_dtype = node_dtype == NULL ? NULL : dtype_of(grad);
    if (grad_dtype == NULL) {
        Py_XDECREF(node_dtype);
        Py_DECREF(grad);
        return NULL;
    }
    int same = grad_dtype == node_dtype;
    if (!same)
        same = PyObject_RichCompareBool(grad_dtype, node_dtype, Py_EQ);
    Py_DECREF(grad_dtype);
    Py_DECREF(node_dtype);
    if (same < 0) {
        Py_DECREF(grad);
        return NULL;
    }
    if (same)
        return grad;
    PyObject *cast = PyObject_CallFunctionObjArgs(cast_arriving, node, grad, NULL);
    Py_DECREF(grad);
    if (cast == Py_None) {
        Py_DECREF(cast);
        return NULL;
    }
    return cast;
}

/* Add ``input_grad`` to the gradient of ``x`` in ``grads`` (``add_grads`` when it has one). */
static int accumulate(PyObject *grads, PyObject *x, PyObject *input_grad, PyObject *add_grads)
{
    PyObject *previous = PyDict_GetItemWithError(grads, x);
    if (previous == NULL) {
        if (PyErr_Occurred())
            return -1;
        return PyDict_SetItem(grads, x, input_grad);
    }
    Py_INCREF(previous);
    PyObject *sum = PyObject_CallFunctionObjArgs(add_grads, previous, input_grad, NULL);
    Py_DECREF(previous);
    if (sum == NULL)
        return -1;
    int status = PyDict_SetItem(grads, x, sum);
    Py_DECREF(sum);
    return status;
}

/* Hand the gradient of the graph node ``node`` on to its inputs through ``op.gradient_data``. */
/* ``node.inputs`` and ``op.gradient_data(grad, node)``, both as PySequence_Fast (new references
 * in ``*xs`` and ``*gs``); -1 on error, with neither held. The inputs are read first, as
 * zip(node.inputs, op.gradient_data(...)) reads them. */
static int inputs_and_gradients(PyObject *node, PyObject *op, PyObject *grad, PyObject **xs, PyObject **gs)
{
    *xs = inputs_of(node);
    if (*xs == NULL)
        return -1;
    PyObject *input_grads = PyObject_CallMethodObjArgs(op, s_gradient_data, grad, node, NULL);
    *gs = input_grads == NULL ? NULL : PySequence_Fast(input_grads, "gradient_data must return a sequence");
    Py_XDECREF(input_grads);
    if (*gs == NULL) {
        Py_CLEAR(*xs);
        return -1;
    }
    return 0;
}

static int pass_to_inputs(PyObject *grads, PyObject *node, PyObject *op, PyObject *grad, PyObject *add_grads)
{
    PyObject *xs, *gs;
    if (inputs_and_gradients(node, op, grad, &xs, &gs) < 0)
        return -1;
    int status = -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(xs);
    if (PySequence_Fast_GET_SIZE(gs) < count)
        count = PySequence_Fast_GET_SIZE(gs); /* zip()'s length */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(xs, i), *input_grad = PySequence_Fast_GET_ITEM(gs, i);
        if (input_grad == Py_None)
            continue;
        Py_INCREF(x); /* held across the calls to Python below */
        Py_INCREF(input_grad);
        int wanted = attribute_is_true(x, REQUIRES_GRAD);
        int failed = wanted < 0 || (wanted && accumulate(grads, x, input_grad, add_grads) < 0);
        Py_DECREF(x);
        Py_DECREF(input_grad);
        if (failed)
            goto done;
    }
    status = 0;
done:
    Py_XDECREF(xs);
    Py_XDECREF(gs);
    return status;
}

/* The gradient reaching ``node``, taken out of ``grads`` and cast to the node's dtype (a new
 * reference); NULL with no error set when none reaches it or the node takes none. */
static PyObject *take_gradient(PyObject *grads, PyObject *node, PyObject *cast_arriving)
{
    PyObject *grad = PyDict_GetItemWithError(grads, node);
    if (grad == NULL)
        return NULL; /* none reaches it (or an error, which the caller sees) */
    Py_INCREF(grad);
    if (PyDict_DelItem(grads, node) < 0) {
        Py_DECREF(grad);
        return NULL;
    }
    return arriving(node, grad, cast_arriving);
}

/* What a pass does with each node the gradient reaches: 0, or -1 on error. */
typedef int (*Visit)(PyObject *grads, PyObject *node, PyObject *grad, void *context);

/* The loop both passes share: each node of ``order``, last first, with the gradient reaching
 * it (take_gradient), handed to ``visit``; the nodes none reaches are skipped. 0, or -1 on error. */
static int walk_backward(PyObject *order, PyObject *output, PyObject *out_grad, PyObject *cast_arriving,
                         Visit visit, void *context)
{
    PyObject *grads = PyDict_New();
    if (grads == NULL || PyDict_SetItem(grads, output, out_grad) < 0)
        goto fail;
    for (Py_ssize_t i = PyList_GET_SIZE(order) - 1; i >= 0; i--) {
        PyObject *node = PyList_GET_ITEM(order, i);
        Py_INCREF(node);
        PyObject *grad = take_gradient(grads, node, cast_arriving);
        if (grad == NULL) {
            Py_DECREF(node);
            if (PyErr_Occurred())
                goto fail;
            continue; /* none reaches it, or an integer or bool value, which takes none */
        }
        int status = visit(grads, node, grad, context);
        Py_DECREF(grad);
        Py_DECREF(node);
        if (status < 0)
            goto fail;
    }
    Py_DECREF(grads);
    return 0;
fail:
    Py_XDECREF(grads);
    return -1;
}

typedef struct {
    PyObject *make_leaf_grad, *add_grads;
} FastPass;

/* The fast pass: a leaf gets ``.grad = make_leaf_grad(grad)``; a graph node hands its gradient on. */
static int visit_fast(PyObject *grads, PyObject *node, PyObject *grad, void *context)
{
    FastPass *pass = context;
    PyObject *op = read_slot(node, OP);
    int status = -1;
    if (op == Py_None) {
        PyObject *leaf_grad = PyObject_CallOneArg(pass->make_leaf_grad, grad);
        if (leaf_grad != NULL) {
            status = PyObject_SetAttr(node, s_grad, leaf_grad);
            Py_DECREF(leaf_grad);
        }
    } else if (op != NULL) {
        status = pass_to_inputs(grads, node, op, grad, pass->add_grads);
    }
    Py_XDECREF(op);
    return status;
}

static PyObject *gradient_pass(PyObject *module, PyObject *args)
{
    PyObject *order, *output, *out_grad, *cast_arriving;
    FastPass pass;
    if (!PyArg_ParseTuple(args, "O!OOOOO:gradient_pass", &PyList_Type, &order, &output, &out_grad,
                          &pass.make_leaf_grad, &pass.add_grads, &cast_arriving))
        return NULL;
    if (walk_backward(order, output, out_grad, cast_arriving, visit_fast, &pass) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The gradient of the constant input ``x`` of ``node`` at ``position``, from the op's
 * ``constant_input_gradients`` (called once per node, kept in ``*constant_grads``); a new
 * reference, Py_None when it gets none, NULL on error. */
static PyObject *constant_gradient(PyObject *op, PyObject *grad, PyObject *node, PyObject *x, Py_ssize_t position,
                                   PyObject *takes_constant_gradient, PyObject **constant_grads)
{
    PyObject *takes = PyObject_CallOneArg(takes_constant_gradient, x);
    int truth = takes == NULL ? -1 : PyObject_IsTrue(takes);
    Py_XDECREF(takes);
    if (truth <= 0)
        return truth < 0 ? NULL : Py_NewRef(Py_None);
    if (*constant_grads == NULL) {
        PyObject *made = PyObject_CallMethodObjArgs(op, s_constant_input_gradients, grad, node, NULL);
        *constant_grads = made == NULL ? NULL : PySequence_Fast(made, "constant_input_gradients must return a sequence");
        Py_XDECREF(made);
        if (*constant_grads == NULL)
            return NULL;
    }
    if (position >= PySequence_Fast_GET_SIZE(*constant_grads)) {
        PyErr_SetString(PyExc_IndexError, "constant_input_gradients returned fewer gradients than the node has inputs");
        return NULL;
    }
    return Py_NewRef(PySequence_Fast_GET_ITEM(*constant_grads, position));
}

/* The course pass's hand-over: every input gets its gradient, constants through
 * ``constant_input_gradients`` (where ``takes_constant_gradient(x)``). */
static int pass_to_all_inputs(PyObject *grads, PyObject *node, PyObject *op, PyObject *grad, PyObject *add_grads,
                              PyObject *takes_constant_gradient)
{
    PyObject *xs, *gs;
    if (inputs_and_gradients(node, op, grad, &xs, &gs) < 0)
        return -1;
    PyObject *constant_grads = NULL;
    int status = -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(xs);
    if (PySequence_Fast_GET_SIZE(gs) < count) {
        PyErr_SetString(PyExc_IndexError, "gradient_data returned fewer gradients than the node has inputs");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(xs, i);
        PyObject *input_grad = Py_NewRef(PySequence_Fast_GET_ITEM(gs, i));
        Py_INCREF(x); /* held across the calls to Python below */
        int failed = 0;
        if (input_grad == Py_None) {
            int wanted = attribute_is_true(x, REQUIRES_GRAD);
            if (wanted < 0) {
                failed = 1;
            } else if (!wanted) {
                Py_SETREF(input_grad, constant_gradient(op, grad, node, x, i, takes_constant_gradient, &constant_grads));
                failed = input_grad == NULL;
            }
        }
        if (!failed && input_grad != Py_None)
            failed = accumulate(grads, x, input_grad, add_grads) < 0;
        Py_DECREF(x);
        Py_XDECREF(input_grad);
        if (failed)
            goto done;
    }
    status = 0;
done:
    Py_XDECREF(xs);
    Py_XDECREF(gs);
    Py_XDECREF(constant_grads);
    return status;
}

typedef struct {
    PyObject *arrived, *add_grads, *takes_constant_gradient;
} CoursePass;

/* The course pass: every node's gradient is noted in ``arrived``; a graph node hands it on to
 * all its inputs, constants included. */
static int visit_course(PyObject *grads, PyObject *node, PyObject *grad, void *context)
{
    CoursePass *pass = context;
    PyObject *pair = PyTuple_Pack(2, node, grad);
    int status = pair == NULL ? -1 : PyList_Append(pass->arrived, pair);
    Py_XDECREF(pair);
    if (status < 0)
        return -1;
    PyObject *op = read_slot(node, OP);
    if (op == NULL)
        return -1;
    if (op != Py_None)
        status = pass_to_all_inputs(grads, node, op, grad, pass->add_grads, pass->takes_constant_gradient);
    Py_DECREF(op);
    return status;
}

static PyObject *course_pass(PyObject *module, PyObject *args)
{
    PyObject *order, *output, *out_grad, *cast_arriving;
    CoursePass pass;
    if (!PyArg_ParseTuple(args, "O!OOOOO:course_pass", &PyList_Type, &order, &output, &out_grad, &pass.add_grads,
                          &cast_arriving, &pass.takes_constant_gradient))
        return NULL;
    pass.arrived = PyList_New(0);
    if (pass.arrived == NULL)
        return NULL;
    if (walk_backward(order, output, out_grad, cast_arriving, visit_course, &pass) < 0) {
        Py_DECREF(pass.arrived);
        return NULL;
    }
    return pass.arrived;
}

/* The leaves of ``order`` that require grad, in order (backward.py's loop before the course pass). */
static PyObject *leaves_requiring_grad(PyObject *module, PyObject *args)
{
    PyObject *order;
    if (!PyArg_ParseTuple(args, "O!:leaves_requiring_grad", &PyList_Type, &order))
        return NULL;
    PyObject *leaves = PyList_New(0);
    if (leaves == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order); i++) {
        PyObject *node = PyList_GET_ITEM(order, i);
        Py_INCREF(node);
        PyObject *op = read_slot(node, OP);
        int status = op == NULL ? -1 : 0;
        if (op == Py_None) {
            status = attribute_is_true(node, REQUIRES_GRAD);
            if (status > 0)
                status = PyList_Append(leaves, node);
        }
        Py_XDECREF(op);
        Py_DECREF(node);
        if (status < 0) {
            Py_DECREF(leaves);
            return NULL;
        }
    }
    return leaves;
}

/* The ``.grad`` the course's backward() gives ``node`` for its arriving gradient ``grad`` (a new
 * reference, NULL on error): see assign_course_grads. */
static PyObject *course_grad(PyObject *node, PyObject *grad, PyObject *output, PyObject *seed, PyObject *seed_tensor,
                             PyObject *leaf_grad_op, PyObject *gradient_tensor, PyObject *detached,
                             PyObject *deferred_type)
{
    PyObject *op = read_slot(node, OP);
    if (op == NULL)
        return NULL;
    int leaf = op == Py_None;
    Py_DECREF(op);
    if (leaf) {
        int wanted = attribute_is_true(node, REQUIRES_GRAD);
        if (wanted < 0)
            return NULL;
        if (wanted)
            return PyObject_CallFunctionObjArgs(gradient_tensor, leaf_grad_op, node, grad, NULL);
        if ((PyObject *)Py_TYPE(grad) == deferred_type)
            return Py_NewRef(grad);
    } else if (grad == seed && node == output && seed_tensor != Py_None) {
        return Py_NewRef(seed_tensor);
    }
    return PyObject_CallOneArg(detached, grad);
}

static PyObject *assign_course_grads(PyObject *module, PyObject *args)
{
    PyObject *arrived, *output, *seed, *seed_tensor, *leaf_grad_op, *gradient_tensor, *detached, *deferred_type;
    if (!PyArg_ParseTuple(args, "O!OOOOOOO:assign_course_grads", &PyList_Type, &arrived, &output, &seed, &seed_tensor,
                          &leaf_grad_op, &gradient_tensor, &detached, &deferred_type))
        return NULL;
    PyObject *nodes = PyList_New(0), *grads = PyList_New(0);
    if (nodes == NULL || grads == NULL)
        goto fail;
    /* every .grad made first: none is written unless all were made */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arrived); i++) {
        PyObject *pair = PyList_GET_ITEM(arrived, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "assign_course_grads: arrived must hold (node, gradient) pairs");
            goto fail;
        }
        Py_INCREF(pair); /* held across the calls to Python below */
        PyObject *node = PyTuple_GET_ITEM(pair, 0);
        PyObject *value = course_grad(node, PyTuple_GET_ITEM(pair, 1), output, seed, seed_tensor, leaf_grad_op,
                                      gradient_tensor, detached, deferred_type);
        int status = value == NULL || PyList_Append(nodes, node) < 0 || PyList_Append(grads, value) < 0 ? -1 : 0;
        Py_XDECREF(value);
        Py_DECREF(pair);
        if (status < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        if (PyObject_SetAttr(PyList_GET_ITEM(nodes, i), s_grad, PyList_GET_ITEM(grads, i)) < 0)
            goto fail;
    }
    Py_DECREF(nodes);
    Py_DECREF(grads);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(nodes);
    Py_XDECREF(grads);
    return NULL;
}

/* Whether the leaf ``node`` is a parameter that requires grad and that no live optimizer
 * updates (its id is not in ``updaters``): 1, 0, or -1 on error. */
static int is_frozen_parameter(PyObject *node, PyObject *updaters)
{
    PyObject *flag = PyObject_GetAttr(node, s_is_parameter);
    int parameter = flag == NULL ? -1 : PyObject_IsTrue(flag);
    Py_XDECREF(flag);
    if (parameter <= 0)
        return parameter;
    int wanted = attribute_is_true(node, REQUIRES_GRAD);
    if (wanted <= 0)
        return wanted;
    PyObject *key = PyLong_FromVoidPtr(node); /* id(node) */
    int updated = key == NULL ? -1 : PyDict_Contains(updaters, key);
    Py_XDECREF(key);
    return updated < 0 ? -1 : !updated;
}

static PyObject *count_spent(PyObject *module, PyObject *args)
{
    PyObject *nodes, *updaters;
    if (!PyArg_ParseTuple(args, "O!O:count_spent", &PyList_Type, &nodes, &updaters))
        return NULL;
    if (updaters != Py_None && !PyDict_Check(updaters)) {
        PyErr_SetString(PyExc_TypeError, "count_spent: updaters must be a dict or None");
        return NULL;
    }
    Py_ssize_t marked = 0, frozen = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        Py_INCREF(node);
        PyObject *op = read_slot(node, OP);
        int status = op == NULL ? -1 : 0;
        if (op == Py_None) {
            if (updaters != Py_None) {
                status = is_frozen_parameter(node, updaters);
                frozen += status > 0;
            }
        } else if (op != NULL) {
            status = attribute_is_true(node, SPENT);
            if (status == 0) {
                status = write_slot(node, SPENT, Py_True);
                marked++;
            }
        }
        Py_XDECREF(op);
        Py_DECREF(node);
        if (status < 0)
            return NULL;
    }
    return Py_BuildValue("nn", marked, frozen);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(NDArray, Value): the array class whose nodes the walk takes, and the class whose\n"
     "slots it reads in place."},
    {"checked_order", checked_order, METH_VARARGS,
     "checked_order(root, prune_constants) -> (order, stale, plain)\n\n"
     "backward.py's _checked_nodes: the nodes root depends on, inputs first; the first node\n"
     "computed from changed data (or None); whether every node holds one NDArray."},
    {"gradient_pass", gradient_pass, METH_VARARGS,
     "gradient_pass(order, output, out_grad, make_leaf_grad, add_grads, cast_arriving) -> None\n\n"
     "The loop of backward.py's compute_gradient_data over a plain graph (see checked_order)."},
    {"count_spent", count_spent, METH_VARARGS,
     "count_spent(nodes, updaters) -> (marked, frozen)\n\n"
     "autograd._count_backward_call's loop: marks each graph node of nodes that is not spent as\n"
     "spent, and counts the parameters among the leaves that require grad and whose id is not in\n"
     "updaters (None: no optimizer lives, none is counted)."},
    {"course_pass", course_pass, METH_VARARGS,
     "course_pass(order, output, out_grad, add_grads, cast_arriving, takes_constant_gradient) -> [(node, grad)]\n\n"
     "The loop of backward.py's compute_gradient_of_variables over a plain graph: the gradient\n"
     "arriving at each node, in the order they arrive; constants get theirs through their op's\n"
     "constant_input_gradients. Assigns no .grad."},
    {"leaves_requiring_grad", leaves_requiring_grad, METH_VARARGS,
     "leaves_requiring_grad(order) -> [node]\n\n"
     "The leaves of order that require grad, in order."},
    {"assign_course_grads", assign_course_grads, METH_VARARGS,
     "assign_course_grads(arrived, output, seed, seed_tensor, leaf_grad_op, gradient_tensor, detached,\n"
     "                    DeferredGradient) -> None\n\n"
     "backward.py's _assign_arrived: each node of course_pass's (node, gradient) pairs gets its .grad,\n"
     "written once all are made."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef backward_walk_module = {
    PyModuleDef_HEAD_INIT, "_backward_walk",
    "The fast backward pass's walk over the graph (see needle/backward.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__backward_walk(void)
{
    static const char *names[] = {"op", "inputs", "_computed_at", "_data_set_at", "requires_grad",
                                  "cached_data", "raw", "dtype", "gradient_data", "grad", "item_gradient",
                                  "constant_input_gradients", "_spent", "_is_parameter"};
    PyObject **slots[] = {&s_op, &s_inputs, &s_computed_at, &s_data_set_at, &s_requires_grad,
                          &s_cached_data, &s_raw, &s_dtype, &s_gradient_data, &s_grad, &s_item_gradient,
                          &s_constant_input_gradients, &s_spent, &s_is_parameter};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *slots[i] = PyUnicode_InternFromString(names[i]);
        if (*slots[i] == NULL)
            return NULL;
    }
    PyObject *in_slot_order[SLOT_COUNT] = {s_op, s_inputs, s_computed_at, s_data_set_at, s_requires_grad, s_cached_data, s_spent, s_raw};
    for (int slot = 0; slot < SLOT_COUNT; slot++)
        slot_names[slot] = in_slot_order[slot];
    return PyModule_Create(&backward_walk_module);
}
