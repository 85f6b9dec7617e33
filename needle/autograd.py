"""The computational graph: Value, Tensor, Op, reverse-mode differentiation and live counters.

``x1 + x2`` goes ``Tensor.__add__`` -> ``EWiseAdd.__call__`` -> ``Tensor.make_from_op`` (a new
node, ``__new__`` + ``_init``) -> ``realize_cached_data`` (inputs first, then ``op.compute``).
With ``LAZY_MODE = True`` the compute waits until something needs the data.

Counters are kept O(1) per node and read with :func:`snapshot`: ``TENSOR_COUNTER`` is the number
of live Values (the course's counter); graph nodes are the live Values that have an op.

Data versions: every Value records the data clock when its array was last set, and every graph
node the clock when it was computed. Replacing a value's array (``x.data = ...``) or updating it
in place (an optimizer step) advances the clock through :func:`mark_data_changed`, so
``backward()`` can tell that a graph was built from values that have changed since, as PyTorch's
version counters do, at the cost of two integer stores per node.
"""
import threading

import numpy
from typing import Dict, List, NamedTuple, Optional, Tuple


from . import live_buffers
from .backend_ndarray import NDArray
from .grad_mode import GRAD_MODE, no_grad
from .live_buffers import _HELD, forget as _forget, hold as _hold, hold_all as _hold_all, release as _release
from . import graph_observers, updated_parameters
from .graph_observers import THREAD as _THREAD

_NUMPY_ARRAY = numpy.ndarray

LAZY_MODE = False

# ---- live counters (module globals: the cheapest thing to bump on every node) -----------------
TENSOR_COUNTER = 0
_VALUES_CREATED = 0
_NODES_CREATED = 0
_NODES_FREED = 0
_BACKWARD_CALLS = 0
_SPENT_MARKED = 0  # graph nodes that some backward() has traversed ("spent"), cumulative
_SPENT_FREED = 0
# NOTE: "unspent" nodes are forward graph nodes freed without any backward() through them (nodes a
# backward() makes are not counted); "wasted" ones are those of them that read a parameter: a
# forward through the model whose graph nobody used, as an evaluation without no_grad builds.
_UNSPENT_FREED = 0
_UNSPENT_FREED_BYTES = 0
_WASTED_FREED = 0
_WASTED_FREED_BYTES = 0
_FROZEN_GRADIENTS = 0  # parameter gradients a backward() computed for no live optimizer (see needle.updated_parameters)
_BYTES_BY_DEVICE: Dict[str, int] = live_buffers.BYTES_BY_DEVICE  # per buffer: see needle.live_buffers

# ---- the data clock: advanced by every change of a value's array after it was made ------------
_DATA_CLOCK = 0
_DATA_CLOCK_LOCK = threading.Lock()  # keeps the clock monotonic when threads change data at once


def mark_data_changed(*values: "Value") -> None:
    """Record that the arrays of ``values`` were replaced or updated in place.

    Graph nodes computed before the change can no longer be differentiated correctly, and
    ``backward()`` through them raises. ``Tensor.data = ...`` and the optimizers' steps call it
    (once a step, for all the parameters they update); code that writes into a tensor's array
    itself should too.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([1.0, 2.0])
        >>> y = (x * x).sum()
        >>> ndl.autograd.mark_data_changed(x)  # e.g. after writing into x.cached_data
        >>> try:
        ...     y.backward()
        ... except RuntimeError as error:
        ...     print(str(error).split(":")[0])
        backward() cannot use this graph
    """
    global _DATA_CLOCK
    with _DATA_CLOCK_LOCK:
        _DATA_CLOCK += 1
        for value in values:
            value._data_set_at = _DATA_CLOCK


class GraphSnapshot(NamedTuple):
    """The graph counters at one moment (all cumulative counts start at import).

    A named tuple: immutable and cheap to make, since a monitor takes one every iteration.
    """

    live_tensors: int
    live_nodes: int
    nodes_created: int
    nodes_freed: int
    tensors_created: int
    backward_calls: int
    bytes_by_device: Dict[str, int]
    # NOTE: a spent node is a live graph node that a backward() has already gone through. A
    # training loop frees them every iteration; when they pile up, something keeps old graphs.
    live_spent_nodes: int = 0
    # freed forward graph nodes no backward() went through (cumulative), and those that read a parameter
    unspent_nodes_freed: int = 0
    unspent_bytes_freed: int = 0
    wasted_nodes_freed: int = 0
    wasted_bytes_freed: int = 0
    # gradients a backward() computed for parameters no live optimizer updates (cumulative)
    frozen_gradients: int = 0

    @property
    def live_bytes(self):
        """Bytes of the buffers needle holds, over all devices: each buffer once (see :func:`snapshot`)."""
        return sum(self.bytes_by_device.values())


def snapshot():
    """Read every graph counter at once, in O(1).

    Bytes are counted per buffer (the memory an array and its views share), each buffer once
    while anything needle keeps refers to it: a live Value's array, a view of it, or an array
    an op saved for its backward pass (:mod:`needle.live_buffers`).

    Example:
        >>> import gc, needle as ndl
        >>> _ = gc.collect()  # garbage of earlier code first, so that only these tensors count
        >>> before = ndl.autograd.snapshot()
        >>> x = ndl.Tensor([1.0, 2.0])
        >>> y = x * x
        >>> after = ndl.autograd.snapshot()
        >>> after.live_tensors - before.live_tensors, after.live_nodes - before.live_nodes
        (2, 1)
        >>> after.bytes_by_device["cpu"] - before.bytes_by_device["cpu"]
        16
    """
    return GraphSnapshot(
        live_tensors=TENSOR_COUNTER,
        live_nodes=_NODES_CREATED - _NODES_FREED,
        nodes_created=_NODES_CREATED,
        nodes_freed=_NODES_FREED,
        tensors_created=_VALUES_CREATED,
        backward_calls=_BACKWARD_CALLS,
        bytes_by_device=dict(_BYTES_BY_DEVICE),
        live_spent_nodes=_SPENT_MARKED - _SPENT_FREED,
        unspent_nodes_freed=_UNSPENT_FREED,
        unspent_bytes_freed=_UNSPENT_FREED_BYTES,
        wasted_nodes_freed=_WASTED_FREED,
        wasted_bytes_freed=_WASTED_FREED_BYTES,
        frozen_gradients=_FROZEN_GRADIENTS,
    )


def owned_bytes(value):
    """Bytes of the buffers ``value`` holds: its array's (a view's whole buffer) and its op's saved arrays.

    Each buffer counts once, even where other values share it; :func:`held_bytes` sizes a set
    of values without counting their shared buffers twice.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([1.0, 2.0, 3.0, 4.0])
        >>> ndl.autograd.owned_bytes(x), ndl.autograd.owned_bytes(x.reshape((2, 2)))
        (16, 16)
    """
    return held_bytes((value,))


def held_bytes(values, exclusive=False):
    """Bytes of the distinct buffers that ``values`` hold (arrays and their ops' saved arrays), each once.

    With ``exclusive``, only the buffers that nothing else needle keeps refers to: the bytes
    that freeing ``values`` would free (a view of an array outside them counts nothing).

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([1.0, 2.0, 3.0, 4.0])
        >>> y = x + 1
        >>> ndl.autograd.held_bytes([x, x.detach(), y]), ndl.autograd.held_bytes([y, y.reshape((2, 2))], exclusive=True)
        (32, 16)
        >>> ndl.autograd.held_bytes([x.reshape((2, 2))], exclusive=True)  # x holds the buffer too
        0
    """
    counts, seen_values, seen_ops = {}, set(), set()
    for value in values:
        if id(value) in seen_values:
            continue
        seen_values.add(id(value))
        live_buffers.tally(value._buffer, counts)
        saved = getattr(value.op, "_saved_for_backward", None)
        if saved is not None and id(value.op) not in seen_ops:
            seen_ops.add(id(value.op))
            live_buffers.tally(saved.tokens, counts)
    return live_buffers.tallied_bytes(counts, exclusive)


def is_spent(value):
    """Whether a backward() has gone through ``value`` (a graph node): for leak diagnostics.

    Example:
        >>> import needle as ndl
        >>> w = ndl.Tensor([1.0], requires_grad=True)
        >>> y = w * w
        >>> before = ndl.autograd.is_spent(y)
        >>> y.backward()
        >>> before, ndl.autograd.is_spent(y)
        (False, True)
    """
    return value._spent


# ---- operators ------------------------------------------------------------------------------
class Op:
    """An operator: ``compute`` does array math, ``gradient`` gives adjoints as Tensor ops.

    An op that keeps arrays for its backward pass keeps them with :meth:`save_for_backward`,
    so that the live-memory counters see them.
    """

    _saved_for_backward = None  # a SavedArrays once save_for_backward is called

    def __call__(self, *args):
        raise NotImplementedError()

    def save_for_backward(self, *arrays):
        """Keep NDArrays (or None) for the backward pass, replacing what was saved before.

        They count in ``snapshot().live_bytes``, per buffer like every array needle holds,
        until :meth:`release_saved` or until the op (and so its node) is freed.

        Example:
            >>> import needle as ndl
            >>> from needle.backend_ndarray import NDArray
            >>> op, before = ndl.autograd.Op(), ndl.autograd.snapshot().live_bytes
            >>> op.save_for_backward(NDArray([1.0, 2.0]), None)
            >>> ndl.autograd.snapshot().live_bytes - before, len(op.saved_arrays)
            (8, 2)
            >>> op.release_saved()
            >>> ndl.autograd.snapshot().live_bytes - before, op.saved_arrays
            (0, ())
        """
        self._saved_for_backward = SavedArrays(arrays)

    @property
    def saved_arrays(self) -> tuple:
        """What :meth:`save_for_backward` kept, in its order; ``()`` when nothing is saved."""
        saved = self._saved_for_backward
        return () if saved is None else saved.arrays

    def release_saved(self):
        """Drop the saved arrays (an op whose first backward uses them up)."""
        self._saved_for_backward = None

    def compute(self, *args: Tuple[NDArray]):
        """Compute the output from input arrays (NDArrays)."""
        raise NotImplementedError()

    def gradient(self, out_grad: "Value", node: "Value"):
        """Partial adjoints for each input, built from Tensor ops so that they form a graph."""
        raise NotImplementedError()

    def gradient_as_tuple(self, out_grad: "Value", node: "Value") -> Tuple["Value"]:
        """``gradient``'s result as a tuple, one entry per input."""
        output = self.gradient(out_grad, node)
        if isinstance(output, tuple):
            return output
        if isinstance(output, list):
            return tuple(output)
        return (output,)

    def gradient_data(self, out_grad, node):
        """Adjoints as plain arrays, for ``backward(create_graph=False)``.

        The default runs ``gradient`` under ``no_grad``; hot ops override it to skip the Tensor
        layer, and may return ``None`` for inputs that do not require a gradient.
        """
        if isinstance(out_grad, tuple):
            out_grad_value = TensorTuple.make_const(out_grad)
        else:
            out_grad_value = Tensor.make_const(out_grad)
        with no_grad():
            grads = self.gradient_as_tuple(out_grad_value, node)
        return tuple(None if g is None else g.realize_cached_data() for g in grads)

    def constant_input_gradients(self, out_grad, node):
        """Adjoints for the inputs that need none but get one from the course's ``backward()``.

        A data batch or a detached weight gets its ``.grad`` there; ``gradient_data`` may skip
        them. One entry per input: an array, a deferred gradient (computed when read; product
        ops defer theirs, see :mod:`needle.deferred`), or None. The default runs ``gradient``
        under ``no_grad``.
        """
        from .deferred import DeferredGradient

        out_grad_value = (TensorTuple if isinstance(out_grad, tuple) else Tensor).make_const(out_grad)
        with no_grad():
            grads = self.gradient_as_tuple(out_grad_value, node)
        return tuple(
            None if g is None else g if g.__class__ is DeferredGradient else g.realize_cached_data() for g in grads
        )


class SavedArrays:
    """Arrays an op keeps for its backward pass: their buffers are held while this object lives."""

    __slots__ = ("arrays", "tokens")

    def __init__(self, arrays):
        for array in arrays:
            if array.__class__ is not NDArray and array is not None and not isinstance(array, NDArray):
                _refuse_unsaveable(arrays)
        self.arrays = arrays = tuple(arrays)
        # NOTE: one loop, held only once every argument is checked (a refusal holds nothing).
        tokens = []
        for array in arrays:
            if array is not None:
                tokens.append(_hold(array))
        self.tokens = tuple(tokens)

    def __del__(self):
        try:
            for token in self.tokens:
                token[0] -= 1  # NOTE: live_buffers.release, inlined (a hold's token is one buffer's list)
                if not token[0]:
                    _forget(token)
        except (AttributeError, NameError, TypeError):
            pass  # never initialised, or interpreter shutdown


def _refuse_unsaveable(arrays):
    """Raise TypeError naming the first of ``arrays`` that is neither an NDArray nor None."""
    for position, array in enumerate(arrays):
        if array is not None and not isinstance(array, NDArray):
            raise TypeError(
                f"save_for_backward: argument {position} is {type(array).__name__}, not an NDArray: "
                "wrap a raw array first, e.g. NDArray.wrap(raw, device)"
            )


class TensorOp(Op):
    """An op whose output is a Tensor."""

    def __call__(self, *args):
        try:
            return Tensor.make_from_op(self, args)
        except AttributeError:
            _check_inputs_are_values(self, args)
            raise


class TensorTupleOp(Op):
    """An op whose output is a TensorTuple."""

    def __call__(self, *args):
        try:
            return TensorTuple.make_from_op(self, args)
        except AttributeError:
            _check_inputs_are_values(self, args)
            raise


def _check_inputs_are_values(op, args):
    """Raise TypeError naming the first input that is not a Tensor (checked only after a failure)."""
    for position, arg in enumerate(args):
        if not isinstance(arg, Value):
            raise TypeError(
                f"{type(op).__name__}: input {position} is {type(arg).__name__} {repr(arg)[:40]}, "
                "not a Tensor: wrap it first, e.g. ndl.Tensor(x, requires_grad=False)"
            )


def _compute(op, inputs):
    # NOTE: a loop, not a comprehension: a comprehension is a function call of its own (Python 3.11).
    arrays = []
    for x in inputs:
        data = x.cached_data
        arrays.append(data if data is not None else x.realize_cached_data())
    try:
        return op.compute(*arrays)
    except OverflowError as error:
        dtypes = ", ".join(str(getattr(a, "dtype", type(a).__name__)) for a in arrays)
        scalar = getattr(op, "scalar", None)
        number = "" if scalar is None else f" {str(scalar)[:30]}"
        raise OverflowError(
            f"{type(op).__name__}: the number{number} does not fit the tensor's dtype ({dtypes}): {error}; "
            "use a smaller number or convert the tensor first, e.g. ndl.Tensor(t, dtype='float64')"
        ) from error
    except (ValueError, TypeError) as error:
        if str(error).startswith(type(op).__name__):
            raise  # the op already named itself and the shapes
        shapes = ", ".join(str(getattr(a, "shape", type(a).__name__)) for a in arrays)
        message = f"{type(op).__name__}: cannot apply to inputs of shapes {shapes}: {error}"
        raise type(error)(message) from error


# id(output) -> weak reference to the GradientGraphs of a backward() from that output, while both
# live: a dying output hands its graph's recipe over (see needle.gradient_graph)
GRAPH_KEEPERS = {}


# ---- values ---------------------------------------------------------------------------------
class Value:
    """A node in the computational graph: an array and, unless it is a leaf, how it was made."""

    __slots__ = (
        "op",  # the Op that produced this value; None for a leaf or a constant
        "inputs",  # the Values fed to ``op``
        "cached_data",  # the array (NDArray, or a tuple of them for a TensorTuple)
        "requires_grad",  # whether backward computes a gradient for this value
        "grad",  # the gradient after backward()
        "_buffer",  # the live_buffers token of the buffers its array holds (None without data)
        "_spent",  # True once a backward() has traversed this node; None for a node a backward() made
        "_data_set_at",  # the data clock when this value's array was last set (made or changed)
        "_computed_at",  # graph nodes only: the data clock when the array was computed from the inputs
        "__weakref__",
    )

    def _init(
        self,
        op: Optional[Op],
        inputs: List["Value"],
        *,
        num_outputs: int = 1,
        cached_data=None,
        requires_grad: Optional[bool] = None,
    ):
        if requires_grad is None:
            requires_grad = any(x.requires_grad for x in inputs)
        _fill(self, op, inputs, cached_data, requires_grad)

    def __del__(self):
        global TENSOR_COUNTER, _NODES_FREED, _SPENT_FREED
        try:
            buffer = self._buffer
        except (AttributeError, NameError):
            return  # never initialised
        try:
            TENSOR_COUNTER -= 1
            if self.op is not None:
                if GRAPH_KEEPERS:
                    keeper = GRAPH_KEEPERS.pop(id(self), None)
                    graphs = None if keeper is None else keeper()
                    if graphs is not None:
                        graphs.keep_recipe(self)
                _NODES_FREED += 1
                spent = self._spent
                if spent:
                    _SPENT_FREED += 1
                elif spent is False and self.requires_grad:
                    _count_unspent_freed(self, buffer[1] if buffer.__class__ is list else 0)
            if buffer is not None:
                if buffer.__class__ is list:  # NOTE: live_buffers.release, inlined for one buffer
                    buffer[0] -= 1
                    if not buffer[0]:
                        popped = _HELD.pop(id(buffer[3]), None)
                        if popped is not buffer and popped is not None:
                            _HELD[id(buffer[3])] = popped  # another thread's token for the key: it stays
                        _BYTES_BY_DEVICE[buffer[2]] -= buffer[1]
                else:
                    _release(buffer)
        except (AttributeError, NameError, TypeError):
            pass  # interpreter shutdown

    def realize_cached_data(self):
        """The array of this value, computing it (and any unrealized inputs) first if needed."""
        data = self.cached_data
        if data is not None:
            return data
        for node in _unrealized_in_topo_order(self):
            node._set_cached_data(_compute(node.op, node.inputs))
            node._computed_at = node._data_set_at = _DATA_CLOCK
        return self.cached_data

    def _set_cached_data(self, data):
        previous, self._buffer = self._buffer, None
        self.cached_data = data
        if data is not None:
            self._buffer = _hold(data) if data.__class__ is NDArray else _hold_all(data)
        _release(previous)

    def _hold_buffer(self, token):
        """Count the buffer of ``token`` (from ``live_buffers.hold``, now this value's) as this
        value's, letting go of the one it held: for an array whose ``raw`` was replaced in
        place, as :mod:`needle.weight_handover` does."""
        previous, self._buffer = self._buffer, token
        _release(previous)

    def _replace_data(self, data):
        """Give this value a new array: graphs that used the old one can no longer be differentiated."""
        self._set_cached_data(data)
        mark_data_changed(self)

    _is_parameter = False  # nn.Parameter sets True: what a "wasted" graph node reads

    def __reduce_ex__(self, protocol):
        # NOTE: pickled and deep-copied without its buffer token (which holds the allocation: a
        # CuPy memory block, which cannot be pickled) and restored through _fill, as a new value
        # is made, so that the counters and live_buffers count the copy. Data clocks restart.
        state = {name: getattr(self, name) for name in _PICKLED_SLOTS if hasattr(self, name)}
        extra = getattr(self, "__dict__", None)  # a subclass without __slots__
        return (_new_value, (type(self),), (state, extra))

    def __setstate__(self, state_and_extra):
        state, extra = state_and_extra
        _fill(self, state["op"], state["inputs"], state["cached_data"], state["requires_grad"])
        self.grad = state["grad"]
        self._spent = state["_spent"]
        if extra:
            self.__dict__.update(extra)

    def is_leaf(self):
        return self.op is None

    @classmethod
    def make_const(cls, data, requires_grad=False):
        """A leaf holding ``data`` (an array, or the data of another Value)."""
        value = cls.__new__(cls)
        if isinstance(data, Value):
            data = data.realize_cached_data()
        _fill(value, None, (), data, requires_grad)
        return value

    @classmethod
    def make_from_op(cls, op: Op, inputs: List["Value"]):
        """The node for ``op(*inputs)``; a constant when nothing needs its gradient."""
        value = cls.__new__(cls)
        if GRAD_MODE.enabled:
            for x in inputs:
                if x.requires_grad:
                    _fill(value, op, inputs, None if LAZY_MODE else _compute(op, inputs), True)
                    if _THREAD.in_backward:
                        value._spent = None  # a gradient graph's node: neither spent nor wasted
                    return value
            if LAZY_MODE:
                _fill(value, op, inputs, None, False)
                return value
        # NOTE: course semantics: a result that needs no gradient is detached at once.
        _fill(value, None, (), _compute(op, inputs), False)
        return value


_PICKLED_SLOTS = ("op", "inputs", "cached_data", "requires_grad", "grad", "_spent")


def _new_value(cls):
    """An empty Value of ``cls`` for unpickling (its ``__setstate__`` fills it)."""
    return cls.__new__(cls)


def _fill(value, op, inputs, data, requires_grad):
    """Set every field of a new Value and bump the counters: the one hot path all nodes take."""
    global TENSOR_COUNTER, _VALUES_CREATED, _NODES_CREATED
    TENSOR_COUNTER += 1
    _VALUES_CREATED += 1
    value._data_set_at = _DATA_CLOCK
    if op is not None:
        _NODES_CREATED += 1
        value._computed_at = _DATA_CLOCK
    value.op = op
    value.inputs = inputs
    value.requires_grad = requires_grad
    value.grad = None
    value._spent = False
    value.cached_data = data
    if data is None:
        value._buffer = None
    elif data.__class__ is NDArray:
        raw = data.raw
        if raw.base is None and raw.__class__ is _NUMPY_ARRAY:
            # NOTE: live_buffers.hold, inlined for the common case: a numpy array that owns its memory.
            token = _HELD.get(id(raw))
            if token is None:
                nbytes = raw.nbytes
                device = data.device.name
                _HELD[id(raw)] = value._buffer = [1, nbytes, device, raw]
                try:
                    _BYTES_BY_DEVICE[device] += nbytes
                except KeyError:
                    _BYTES_BY_DEVICE[device] = nbytes
            else:
                token[0] += 1
                value._buffer = token
        else:
            value._buffer = _hold(data)
    else:
        value._buffer = _hold_all(data)


def _count_unspent_freed(node, nbytes):
    """Count a forward graph node freed unspent, and tell this thread's observers (rare: see __del__)."""
    global _UNSPENT_FREED, _UNSPENT_FREED_BYTES, _WASTED_FREED, _WASTED_FREED_BYTES
    _UNSPENT_FREED += 1
    _UNSPENT_FREED_BYTES += nbytes
    reads_parameter = False
    for x in node.inputs:
        if x.op is None and x.requires_grad and (x._is_parameter or x.grad is not None):
            reads_parameter = True
            _WASTED_FREED += 1
            _WASTED_FREED_BYTES += nbytes
            break
    for observer in _THREAD.observers:
        observer.node_freed_unspent(node, reads_parameter)


def _unrealized_in_topo_order(root):
    """The nodes without data that ``root`` depends on, inputs before the nodes they feed."""
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for x in node.inputs:
            if x.cached_data is None and id(x) not in visited:
                stack.append((x, False))
    return order


class TensorTuple(Value):
    """A tuple of tensors that is one node (the output of ``make_tuple``, ``split``)."""

    __slots__ = ()

    def __len__(self):
        return len(self.realize_cached_data())

    def __getitem__(self, index: int):
        from .ops.ops_tuple import tuple_get_item

        return tuple_get_item(self, index)

    def tuple(self):
        return tuple(self[i] for i in range(len(self)))

    def __iter__(self):
        return iter(self.tuple())

    def __repr__(self):
        # NOTE: printed from the arrays, so printing makes no TupleGetItem nodes.
        items = ", ".join(f"needle.Tensor({array})" for array in self.realize_cached_data())
        op = "" if self.op is None else f", op={type(self.op).__name__}"
        return f"needle.TensorTuple({items}{op})"

    def __str__(self):
        return self.__repr__()

    def __add__(self, other):
        from .ops.ops_tuple import make_tuple

        if not isinstance(other, TensorTuple) or len(self) != len(other):
            raise ValueError("a TensorTuple can only be added to a TensorTuple of the same length")
        return make_tuple(*[self[i] + other[i] for i in range(len(self))])

    def detach(self):
        """A TensorTuple with the same data and no graph."""
        return TensorTuple.make_const(self.realize_cached_data())


from .tensor import Tensor  # noqa: E402  (Tensor subclasses Value, defined above)
from . import backward_walk  # noqa: E402
from .backward import (  # noqa: E402
    compute_gradient_of_variables,
    find_topo_sort,
    sum_node_list,
    topo_sort_dfs,
)
from .backend_selection import Device, all_devices, array_api, cpu, default_device  # noqa: E402,F401  (course names, see needle.course_compat)


def _count_backward_call(nodes):
    """Count one backward() pass and mark the graph nodes it traversed as spent."""
    global _BACKWARD_CALLS, _SPENT_MARKED, _FROZEN_GRADIENTS
    _BACKWARD_CALLS += 1
    optimizers = updated_parameters.any_optimizer()
    count_spent = backward_walk.count_spent
    if count_spent is not None and nodes.__class__ is list:
        marked, frozen = count_spent(nodes, updated_parameters._UPDATERS if optimizers else None)
        _SPENT_MARKED += marked
        _FROZEN_GRADIENTS += frozen
        return
    marked = frozen = 0
    for node in nodes:
        if node.op is None:
            if optimizers and node._is_parameter and node.requires_grad and not updated_parameters.is_updated(node):
                frozen += 1
        elif not node._spent:
            node._spent = True
            marked += 1
    _SPENT_MARKED += marked
    _FROZEN_GRADIENTS += frozen


def run_backward(output, run):
    """Run ``run()`` (a backward pass from ``output``, returning the nodes it traversed) as this
    thread's backward phase: observers hear it start and finish, nodes it makes are marked as
    a backward's, and the traversed nodes are counted as spent."""
    observers = _THREAD.observers
    for observer in observers:
        observer.backward_started(output)
    previous = _THREAD.in_backward
    _THREAD.in_backward = True
    try:
        traversed = run()
    finally:
        _THREAD.in_backward = previous
    _count_backward_call(traversed)
    for observer in observers:
        observer.backward_finished(output, traversed)
    return traversed


# ---- node observers: zero cost unless a diagnostic asks (see needle.graph_observers) --------------
_NODE_OBSERVERS = []  # the function observers (add_node_observer), over all threads
_PLAIN_MAKE_FROM_OP = Value.__dict__["make_from_op"].__func__


def _make_from_op_observed(cls, op, inputs):
    value = _PLAIN_MAKE_FROM_OP(cls, op, inputs)
    if value.op is not None:
        for observer in _THREAD.observers:
            observer.node_made(value)
    return value


def _switch_make_from_op(observed):
    Value.make_from_op = classmethod(_make_from_op_observed if observed else _PLAIN_MAKE_FROM_OP)


graph_observers._switch_hooks.append(_switch_make_from_op)


class _FunctionObserver(graph_observers.GraphObserver):
    """Adapts a plain ``observer(node)`` function to the observer interface."""

    def __init__(self, function):
        self.function = function

    def node_made(self, node):
        self.function(node)


def add_node_observer(observer):
    """Call ``observer(node)`` for every graph node this thread makes from now on, until removed.

    For diagnostics: while no observer is installed, making a node costs nothing extra; while
    one is, every op pays for the call. For the phase (forward/backward) and freed nodes, add a
    :class:`needle.graph_observers.GraphObserver` with ``graph_observers.add_observer``.
    """
    adapter = _FunctionObserver(observer)
    _NODE_OBSERVERS.append(adapter)
    graph_observers.add_observer(adapter)


def remove_node_observer(observer):
    """Stop calling ``observer``; the last removal restores the plain, unobserved path."""
    for adapter in _NODE_OBSERVERS:
        if adapter.function == observer:
            _NODE_OBSERVERS.remove(adapter)
            graph_observers.remove_observer(adapter)
            return


__all__ = [
    "LAZY_MODE",
    "TENSOR_COUNTER",
    "GraphSnapshot",
    "Op",
    "Tensor",
    "TensorOp",
    "TensorTuple",
    "TensorTupleOp",
    "Value",
    "add_node_observer",
    "remove_node_observer",
    "run_backward",
    "compute_gradient_of_variables",
    "find_topo_sort",
    "held_bytes",
    "is_spent",
    "mark_data_changed",
    "owned_bytes",
    "snapshot",
    "sum_node_list",
    "topo_sort_dfs",
]
