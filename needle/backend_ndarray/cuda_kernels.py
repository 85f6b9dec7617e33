"""needle's CUDA kernels, as CuPy's ElementwiseKernel takes them: (in_params, out_params,
operation, name).

Each is a plain tuple, so that tests can compile them (NVRTC) or run their operations on the
host (g++) without a GPU; :class:`~needle.backend_ndarray.kernels_cupy.CupyKernels` builds them.
"""

RELU_BACKWARD = (
    "T out_grad, T out", "T in_grad",
    "in_grad = out > (T)0 ? out_grad : (T)0",
    "needle_relu_backward",
)
# NOTE: one thread per row, which suits the few classes of a classifier (10 for MNIST). A label
# outside [0, classes) makes that row's loss NaN and its gradient row plain softmax: the loss
# then shows the error without the device sync a range check would cost every step.
SOFTMAX_CROSS_ENTROPY_ROWS = (
    "raw T logits, raw I labels, int32 classes", "raw T exp_shifted, T totals, T row_losses",
    """
    const long long start = i * classes;
    T largest = logits[start];
    for (int c = 1; c < classes; ++c) largest = logits[start + c] > largest ? logits[start + c] : largest;
    T total = 0;
    for (int c = 0; c < classes; ++c) {
        T e = exp(logits[start + c] - largest);
        exp_shifted[start + c] = e;
        total += e;
    }
    totals = total;
    long long label = (long long)labels[i];
    row_losses = (label >= 0 && label < classes) ? log(total) - (logits[start + label] - largest) : (T)nan("");
    """,
    "needle_softmax_cross_entropy_rows",
)
SOFTMAX_CROSS_ENTROPY_GRADIENT = (
    "raw T totals, raw I labels, raw T out_grad, int32 classes, T inverse_batch", "T exp_shifted",
    """
    long long row = i / classes;
    T scale = out_grad[0] * inverse_batch;
    long long label = (long long)labels[row];
    exp_shifted = exp_shifted * (scale / totals[row]) - ((long long)(i % classes) == label ? scale : (T)0);
    """,
    "needle_softmax_cross_entropy_gradient",
)
# NOTE: the multi-tensor updates take up to SLOTS parameters in one launch, one thread per
# element of all of them together; slot j's thread subtracts the sizes before it to find its
# element. Unused slots have size 0 and are never read.
SLOTS = 8


def multi_tensor(name, scalars, inputs, outputs, update, from_table=False):
    """An ElementwiseKernel spec applying ``update`` to the elements of up to SLOTS parameters.

    ``update`` is C code for element ``k`` of one slot; ``{name}`` in it stands for that slot's
    array called ``name`` (one of ``inputs``/``outputs``). Arguments: the scalars, the SLOTS
    sizes, then each input and each output array for every slot; call it with ``size=`` the total.

    ``from_table=True`` makes the variant a CUDA graph replays: the scalars are not arguments
    (a graph would bake them) but are read from the device, from row ``table_row[0]`` of
    ``table`` (one row of ``len(scalars)`` values per step, in the order of ``scalars``), so the
    two arguments ``table, table_row`` replace the scalars. The arithmetic is the same code.
    """
    if from_table:
        in_params = ["raw T table", "raw int64 table_row"]
        width = len(scalars)
        reads = [f"const T {scalar} = table[base + {n}];" for n, scalar in enumerate(scalars)]
        prologue = f"const long long base = table_row[0] * {width};\n" + "\n".join(reads) + "\n"
    else:
        in_params = [f"T {scalar}" for scalar in scalars]
        prologue = ""
    in_params += [f"int64 size{j}" for j in range(SLOTS)]
    in_params += [f"raw T {array}{j}" for array in inputs for j in range(SLOTS)]
    out_params = [f"raw T {array}{j}" for array in outputs for j in range(SLOTS)]
    branches = []
    for j in range(SLOTS):
        test = "k < size0" if j == 0 else f"(k -= size{j - 1}) < size{j}"
        body = update.format(**{array: f"{array}{j}" for array in inputs + outputs})
        branches.append(f"if ({test}) {{ {body} }}")
    operation = prologue + "long long k = i;\n" + "\nelse ".join(branches)
    return ", ".join(in_params), ", ".join(out_params), operation, name


# The scalars of each update, in the order its kernels take them (and a table row holds them).
SGD_SCALARS = ("lr", "weight_decay")
MOMENTUM_SCALARS = ("momentum", "step", "weight_decay")
ADAM_SCALARS = ("beta1", "beta2", "eps", "weight_decay", "step_size", "inverse_sqrt_c2")
_SGD_UPDATE = "{weight}[k] -= lr * ({gradient}[k] + weight_decay * {weight}[k]);"
_MOMENTUM_UPDATE = (
    "T v = momentum * {velocity}[k] + {gradient}[k] + weight_decay * {weight}[k]; "
    "{velocity}[k] = v; {weight}[k] -= step * v;"
)
_ADAM_UPDATE = (
    "T g = {gradient}[k] + weight_decay * {weight}[k]; "
    "T m = beta1 * {first}[k] + (1 - beta1) * g; T s = beta2 * {second}[k] + (1 - beta2) * (g * g); "
    "{first}[k] = m; {second}[k] = s; {weight}[k] -= step_size * m / (sqrt(s) * inverse_sqrt_c2 + eps);"
)
SGD_STEPS = multi_tensor("needle_sgd_steps", SGD_SCALARS, ("gradient",), ("weight",), _SGD_UPDATE)
MOMENTUM_STEPS = multi_tensor(
    "needle_momentum_steps", MOMENTUM_SCALARS, ("gradient",), ("velocity", "weight"), _MOMENTUM_UPDATE
)
ADAM_STEPS = multi_tensor("needle_adam_steps", ADAM_SCALARS, ("gradient",), ("first", "second", "weight"), _ADAM_UPDATE)
SGD_STEPS_FROM_TABLE = multi_tensor(
    "needle_sgd_steps_from_table", SGD_SCALARS, ("gradient",), ("weight",), _SGD_UPDATE, from_table=True
)
MOMENTUM_STEPS_FROM_TABLE = multi_tensor(
    "needle_momentum_steps_from_table", MOMENTUM_SCALARS, ("gradient",), ("velocity", "weight"), _MOMENTUM_UPDATE,
    from_table=True,
)
ADAM_STEPS_FROM_TABLE = multi_tensor(
    "needle_adam_steps_from_table", ADAM_SCALARS, ("gradient",), ("first", "second", "weight"), _ADAM_UPDATE,
    from_table=True,
)
# NOTE: a kernel of its own, after the updates that read the row: a thread of theirs that moved
# it on would race the others reading it.
NEXT_TABLE_ROW = ("int64 rows", "raw int64 table_row", "table_row[0] += rows", "needle_next_table_row")
KERNELS = {
    "_relu_backward": RELU_BACKWARD,
    "_softmax_cross_entropy_rows": SOFTMAX_CROSS_ENTROPY_ROWS,
    "_softmax_cross_entropy_gradient": SOFTMAX_CROSS_ENTROPY_GRADIENT,
    "_sgd_steps": SGD_STEPS,
    "_momentum_steps": MOMENTUM_STEPS,
    "_adam_steps": ADAM_STEPS,
    "_sgd_steps_from_table": SGD_STEPS_FROM_TABLE,
    "_momentum_steps_from_table": MOMENTUM_STEPS_FROM_TABLE,
    "_adam_steps_from_table": ADAM_STEPS_FROM_TABLE,
    "_next_table_row": NEXT_TABLE_ROW,
}
