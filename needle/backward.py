"""Reverse-mode differentiation over the graph: topological order, then adjoints summed per node.

Two paths share the rules below. ``compute_gradient_of_variables`` (``backward()``, the course's)
builds gradients as Tensor graphs and gives every node of the graph its ``.grad``;
``compute_gradient_data`` (``backward(create_graph=False)``) works on arrays and sets ``.grad``
only on the leaves that require it.

- A node's gradient has the node's dtype: a float32 leaf added to a float64 tensor gets a
  float32 ``.grad`` (the forward follows numpy's promotion; the gradient is cast back, as in
  PyTorch).
- Gradients are defined for floating-point values only: integer and bool values (class labels,
  masks) get none, and nothing flows through them.
- A node that no gradient reaches (an op gives ``None`` for it, e.g. the labels of a loss)
  keeps its ``.grad`` as it was.
- The ops that read one item of a TensorTuple (``tuple_get_item``) hand back that item's
  gradient only; the tuple's gradient is built once, dense, when its turn comes, so reading all
  n items of a ``split`` costs O(n), not n dense tuples summed (O(n^2)).
- Before any ``.grad`` is written, every node is checked against the data clock: a graph built
  from a value whose array has changed since (``x.data = ...``, an optimizer step) raises.
"""
import operator
from functools import reduce

from . import backward_walk
from .backend_ndarray import NDArray
from .backend_selection import integer_gradients


def find_topo_sort(node_list, prune_constants=False):
    """Every node the given nodes depend on, inputs before the nodes that use them.

    A post-order depth-first search, iterative so that graphs thousands of nodes deep work.
    With ``prune_constants`` the search does not enter values that need no gradient.
    """
    order, visited = [], set()
    for root in node_list:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node in visited:
                continue
            visited.add(node)
            stack.append((node, True))
            for x in reversed(node.inputs):
                if x not in visited and (x.requires_grad or not prune_constants):
                    stack.append((x, False))
    return order


def topo_sort_dfs(node, visited, topo_order):
    """The course's recursive helper: append ``node``'s unvisited ancestors, then ``node``."""
    for x in find_topo_sort([node]):
        if x not in visited:
            visited.add(x)
            topo_order.append(x)


def sum_node_list(node_list):
    """Sum a list of gradients (Tensors or arrays) without a leading zero."""
    return reduce(operator.add, node_list)


def check_graph_unchanged(order):
    """Raise RuntimeError if a node of ``order`` was computed from data that has changed since.

    A node is stale when one of its inputs' arrays, or its own, was set after the node was
    computed: its gradient would mix the new values with the old result.
    """
    for node in order:
        if node.op is None:
            continue
        computed_at = node._computed_at
        if node._data_set_at != computed_at:
            raise RuntimeError(_stale_message(node, f"the output of {type(node.op).__name__}"))
        for x in node.inputs:
            if x._data_set_at > computed_at:
                index = next(i for i, y in enumerate(node.inputs) if y is x)
                raise RuntimeError(_stale_message(x, f"input {index} of {type(node.op).__name__}"))


def _stale_message(value, role):
    data = value.cached_data
    what = f"shape {data.shape}, dtype {data.dtype}" if isinstance(data, NDArray) else "a tuple"
    return (
        f"backward() cannot use this graph: a {type(value).__name__} ({what}), {role}, had its data "
        "changed after the graph was built (by `.data = ...`, load_state_dict, Module.to or "
        "mark_data_changed), so the gradient would mix old and new values. Run the forward pass again after "
        "changing it, then call backward(); to change a tensor and keep the graph, change a copy "
        "(ndl.Tensor(x))."
    )


def _node_dtype(node):
    """The dtype of ``node``'s array; None for a TensorTuple (its items carry their own)."""
    data = node.cached_data
    return data.raw.dtype if data.__class__ is NDArray else None


def compute_gradient_of_variables(output_tensor, out_grad, keep_graph=False):
    """Store in ``.grad`` of every node of the graph the gradient of ``output_tensor``.

    The course's semantics: every node is visited, constants included, so a data batch or a
    detached weight gets its ``.grad`` too, and a leaf that requires grad gets a gradient that
    can be differentiated again. The gradients are computed as arrays; each such leaf's
    ``.grad`` is a :class:`~needle.gradient_graph.GradientGraph` node, which builds the
    gradient's graph only if a later backward() goes through it (while ``output_tensor`` lives,
    or as long as the gradient does with ``keep_graph``), and a constant's gradient
    through a product (the data batch of the first layer) is a
    :class:`~needle.deferred.DeferredGradient`, computed only when it is read. Other nodes
    get their gradient's value, detached. No ``.grad`` changes unless the whole pass succeeds.
    Returns the nodes traversed, in topological order.
    """
    autograd, DeferredGradient, GradientGraphs, GradientGraph, gradient_tensor = _LATE.names or _LATE.load()

    order, plain = _walk_order(output_tensor, prune_constants=False)
    if plain:  # every node holds one NDArray (checked by the C walk)
        leaves, arrays_only = backward_walk.leaves_requiring_grad(order), True
    else:
        leaves, arrays_only = _leaves_requiring_grad(order)
    if autograd.LAZY_MODE or not arrays_only:
        # NOTE: lazy mode's nodes have no arrays yet, and a TensorTuple leaf's gradient is a
        # tuple: both get the gradient graphs themselves, built now.
        _assign_course_gradients(order, gradient_graphs(output_tensor, out_grad, order))
        return order
    seed = out_grad.realize_cached_data()
    if plain:
        arrived = backward_walk.course_pass(
            order, output_tensor, seed, _add_course_grads, _cast_arriving, _takes_constant_gradient
        )
    else:
        arrived = _course_pass(order, output_tensor, seed)
    leaf_grad_op = GradientGraph(GradientGraphs(output_tensor, out_grad, leaves, keep_graph))
    # NOTE: the output's gradient is the seed; a constant seed is its .grad as it is, as in the course
    seed_tensor = out_grad if out_grad.op is None and not out_grad.requires_grad else None
    assign = backward_walk.assign_course_grads if plain else _assign_arrived
    assign(arrived, output_tensor, seed, seed_tensor, leaf_grad_op, gradient_tensor, _detached, DeferredGradient)
    return order


def _leaves_requiring_grad(order):
    """``(leaves, arrays_only)``: the leaves of ``order`` that require grad, and whether each holds one NDArray."""
    leaves = []
    arrays_only = True
    for node in order:
        if node.op is None and node.requires_grad:
            leaves.append(node)
            arrays_only = arrays_only and node.cached_data.__class__ is NDArray
    return leaves, arrays_only


def _assign_arrived(arrived, output, seed, seed_tensor, leaf_grad_op, gradient_tensor, detached, deferred_class):
    """Give each node of ``arrived`` (the course pass's ``[(node, gradient array)]``) its ``.grad``,
    written once all are made: a leaf that requires grad a node of ``leaf_grad_op`` (made by
    ``gradient_tensor``), a constant's deferred gradient itself, the output its constant seed
    ``seed_tensor`` (when there is one), every other node its gradient detached. What
    ``backward_walk.assign_course_grads`` does in C."""
    assigned = []  # (node, .grad): written once every one is made
    append = assigned.append
    for node, grad in arrived:
        if node.op is None:
            if node.requires_grad:
                grad = gradient_tensor(leaf_grad_op, node, grad)
            elif grad.__class__ is not deferred_class:
                grad = detached(grad)
        elif grad is seed and node is output and seed_tensor is not None:
            grad = seed_tensor
        else:
            grad = detached(grad)
        append((node, grad))
    for node, grad in assigned:
        node.grad = grad


def _course_pass(order, output_tensor, out_grad):
    """The loop of :func:`compute_gradient_of_variables` over ``order``: ``[(node, gradient)]``
    for every node a gradient reaches, in the order they arrive (an array, or a constant's
    :class:`~needle.deferred.DeferredGradient`). What ``backward_walk.course_pass`` does in C."""
    grads_by_node = {output_tensor: out_grad}
    item_grads_by_tuple = {}
    arrived = []
    get = grads_by_node.get
    for node in reversed(order):
        grad = _gradient_arriving_at(node, grads_by_node, item_grads_by_tuple)
        if grad is None:
            continue  # none reaches it (an op defines none for labels), or it is an integer or bool value
        arrived.append((node, grad))
        op = node.op
        if op is None:
            continue
        inputs = node.inputs
        if hasattr(op, "item_gradient"):  # one item of a tuple: kept sparse until the tuple's turn
            index, item_grad = op.item_gradient(grad, node)
            item_grads_by_tuple.setdefault(inputs[0], {}).setdefault(index, []).append(item_grad)
            continue
        input_grads = op.gradient_data(grad, node)
        constant_grads = None
        for position, x in enumerate(inputs):
            input_grad = input_grads[position]
            if input_grad is None:
                if x.requires_grad or not _takes_constant_gradient(x):
                    continue
                if constant_grads is None:
                    constant_grads = op.constant_input_gradients(grad, node)
                input_grad = constant_grads[position]
                if input_grad is None:
                    continue
            previous = get(x)
            grads_by_node[x] = input_grad if previous is None else _add_course_grads(previous, input_grad)
    return arrived


def _add_course_grads(previous, grad):
    """Sum two gradients of the course pass (a deferred one is computed first)."""
    return _add_grads(_array_of(previous), _array_of(grad))


def _gradient_arriving_at(node, grads_by_node, item_grads_by_tuple):
    """The gradient array reaching ``node`` (taken out of ``grads_by_node``), in the node's dtype;
    None when none reaches it, or when it is an integer or bool value (which takes none)."""
    grad = grads_by_node.pop(node, None)
    if item_grads_by_tuple and node in item_grads_by_tuple:
        grad = _with_item_grads(node, grad, item_grads_by_tuple.pop(node), as_tensors=False)
    if grad is None:
        return None
    data = node.cached_data
    if data.__class__ is NDArray:
        dtype = data.raw.dtype
        grad_dtype = grad.raw.dtype if grad.__class__ is NDArray else grad.dtype  # a deferred gradient knows its own
        if grad_dtype is not dtype and grad_dtype != dtype:
            return _cast_arriving(node, grad)
    return grad


def _cast_arriving(node, grad):
    """``grad``, of another dtype than the array of ``node``, cast to it; None for an integer or
    bool node (which takes no gradient)."""
    dtype = node.cached_data.raw.dtype
    if dtype.kind != "f":
        return None
    return _array_of(grad).astype(dtype)


def _array_of(grad):
    """An array gradient as it is; a deferred one computed (it is about to be summed or cast)."""
    return grad.realize_cached_data() if hasattr(grad, "realize_cached_data") else grad


def _detached(grad):
    """An inner node's gradient array as a constant Tensor (or TensorTuple)."""
    autograd = _LATE.names[0]
    cls = autograd.Tensor if grad.__class__ is NDArray else autograd.TensorTuple
    value = cls.__new__(cls)
    autograd._fill(value, None, (), grad, False)
    return value


class _LATE:
    """The modules the course path uses that build on Tensor (which imports this module):
    imported at its first call, not per call (an import statement in a function costs a
    look-up through the import system every time)."""

    names = None

    @classmethod
    def load(cls):
        from . import autograd
        from .deferred import DeferredGradient
        from .gradient_graph import GradientGraph, GradientGraphs, gradient_tensor

        cls.names = (autograd, DeferredGradient, GradientGraphs, GradientGraph, gradient_tensor)
        return cls.names


def _takes_constant_gradient(value):
    """Whether the course's backward() gives the constant ``value`` a gradient: a leaf array of floats
    (or, under ``NEEDLE_BACKEND=np``, of integers, as the course's numpy backend does)."""
    if value.op is not None:
        return False
    data = value.cached_data
    if data.__class__ is not NDArray:
        return False
    dtype = data.raw.dtype
    return dtype.kind == "f" or integer_gradients(dtype)


def gradient_graphs(output_tensor, out_grad, order):
    """The gradient of ``output_tensor`` seeded with the Tensor ``out_grad``, as Tensor graphs.

    ``order``: the nodes to differentiate, in topological order (from :func:`find_topo_sort`).
    Returns ``{node: gradient}`` for each node a gradient reaches, cast to the node's dtype;
    assigns no ``.grad``. What :class:`~needle.gradient_graph.GradientGraph` builds, and what
    lazy mode's backward() keeps.
    """
    grads_by_node = {output_tensor: [out_grad]}
    item_grads_by_tuple = {}  # a TensorTuple -> {item index: [gradients]}, made dense once
    result = {}
    for node in reversed(order):
        grads = grads_by_node.pop(node, None)
        if item_grads_by_tuple and node in item_grads_by_tuple:
            grads = _with_item_grads(node, grads, item_grads_by_tuple.pop(node), as_tensors=True)
        if grads is None:
            continue  # no gradient reaches it: an op defines none for it (labels)
        grad = sum_node_list(grads)
        dtype = _node_dtype(node)
        if dtype is not None and grad.dtype != dtype:
            if dtype.kind != "f":
                continue  # an integer or bool value: no gradient is defined
            from .ops.ops_mathematic import astype

            grad = astype(grad, dtype)
        result[node] = grad
        if node.op is None:
            continue
        if hasattr(node.op, "item_gradient"):  # one item of a tuple: kept sparse until the tuple's turn
            index, item_grad = node.op.item_gradient(grad, node)
            item_grads_by_tuple.setdefault(node.inputs[0], {}).setdefault(index, []).append(item_grad)
            continue
        for x, input_grad in zip(node.inputs, node.op.gradient_as_tuple(grad, node)):
            if input_grad is not None:
                grads_by_node.setdefault(x, []).append(input_grad)
    return result


def _assign_course_gradients(order, grads):
    """Give every node of ``order`` its gradient from ``grads``, as lazy mode's backward() does."""
    from .deferred import DeferredGradient

    for node in order:
        grad = grads.get(node)
        if grad is None:
            continue
        if node.op is None and node.requires_grad:
            node.grad = grad  # a leaf keeps the graph: its gradient can be differentiated
        elif node.op is None and grad.__class__ is DeferredGradient:
            node.grad = grad  # a constant's deferred gradient is already a plain leaf, computed when read
        else:
            # NOTE: other nodes keep their gradient's value, detached. An inner node's gradient
            # graph refers to the nodes that use it, so keeping it would make a reference cycle
            # that only the garbage collector could free; a constant (a data batch, a detached
            # weight) that outlives the step would keep this step's graphs alive through it.
            node.grad = grad.detach()


def _with_item_grads(node, grads, item_grads, as_tensors):
    """``grads`` of the TensorTuple ``node`` with its items' gradients added as one dense tuple,
    built here once however many ops read its items (``grads``: a list of Tensors, or an array
    tuple or None on the array path)."""
    from .ops.ops_tuple import dense_tuple_gradient

    dense = dense_tuple_gradient(node, item_grads, as_tensors)
    if not as_tensors:
        return dense if grads is None else _add_grads(grads, dense)
    return [dense] if grads is None else grads + [dense]


def compute_gradient_data(output_tensor, out_grad, make_leaf_grad):
    """The fast path of ``backward(create_graph=False)``: arrays only, no graph built.

    Only the nodes that require a gradient are visited; leaves among them get ``.grad`` (made
    by ``make_leaf_grad``), inner nodes keep none, so nothing of the backward pass outlives it.
    Returns the nodes traversed. Walked in C where :mod:`needle.backward_walk` is built (the
    same order and calls), else by the Python loops below.
    """
    order, plain = _walk_order(output_tensor, prune_constants=True)
    if plain:
        backward_walk.gradient_pass(order, output_tensor, out_grad, make_leaf_grad, _add_grads, _cast_arriving)
    else:
        _gradient_pass(order, output_tensor, out_grad, make_leaf_grad)
    return order


def _gradient_pass(order, output_tensor, out_grad, make_leaf_grad):
    """The loop of :func:`compute_gradient_data` over ``order`` (from :func:`_checked_nodes`)."""
    grads_by_node = {output_tensor: out_grad}
    item_grads_by_tuple = {}
    get = grads_by_node.get
    for node in reversed(order):
        grad = _gradient_arriving_at(node, grads_by_node, item_grads_by_tuple)
        if grad is None:
            continue  # requires grad, but none reaches it (integer labels of a loss), or it takes none
        op = node.op
        if op is None:
            node.grad = make_leaf_grad(grad)
            continue
        if hasattr(op, "item_gradient"):
            if node.inputs[0].requires_grad:
                index, item_grad = op.item_gradient(grad, node)
                item_grads_by_tuple.setdefault(node.inputs[0], {}).setdefault(index, []).append(item_grad)
            continue
        for x, input_grad in zip(node.inputs, op.gradient_data(grad, node)):
            if input_grad is None or not x.requires_grad:
                continue
            previous = get(x)
            grads_by_node[x] = input_grad if previous is None else _add_grads(previous, input_grad)


def _walk_order(root, prune_constants):
    """``(order, plain)``: :func:`_checked_nodes`, and whether the C walk can take the graph's
    gradient pass (:func:`needle.backward_walk.checked_order`); plain is False without it."""
    checked_order = backward_walk.checked_order
    if checked_order is None:
        return _checked_nodes_in_python(root, prune_constants), False
    order, stale, plain = checked_order(root, prune_constants)
    if stale is not None:
        check_graph_unchanged((stale,))  # raises, naming the value that changed
        raise RuntimeError(f"backward(): the C walk found {stale!r} computed from changed data")
    return order, plain


def _checked_nodes(root, prune_constants):
    """``find_topo_sort([root], prune_constants)`` and ``check_graph_unchanged`` in one pass.

    The backward passes' traversal: a leaf is placed at once (it has no inputs to wait for), and
    a graph node's data clock is checked as it is entered, so the stale-graph error comes before
    any ``.grad`` is written. In C where :mod:`needle.backward_walk` is built.
    """
    return _walk_order(root, prune_constants)[0]


def _checked_nodes_in_python(root, prune_constants):
    """:func:`_checked_nodes` in Python (what the C walk does, step for step)."""
    order, visited = [], set()
    append, add = order.append, visited.add
    stack = [(root, False)]
    push, pop = stack.append, stack.pop
    while stack:
        node, expanded = pop()
        if expanded:
            append(node)
            continue
        if node in visited:
            continue
        add(node)
        if node.op is None:
            append(node)
            continue
        computed_at = node._computed_at
        stale = node._data_set_at != computed_at
        push((node, True))
        for x in reversed(node.inputs):
            if x._data_set_at > computed_at:
                stale = True
            if (x.requires_grad or not prune_constants) and x not in visited:
                push((x, False))
        if stale:
            check_graph_unchanged((node,))  # raises, naming the value that changed
    return order


def _add_grads(previous, grad):
    """Sum two array gradients; a TensorTuple's gradients (tuples of arrays) add item by item."""
    if isinstance(previous, tuple):
        return tuple(p + g for p, g in zip(previous, grad))
    return previous + grad
