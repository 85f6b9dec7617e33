"""A leaf's ``.grad`` after the course's ``backward()``: its value now, its graph when it is differentiated.

The course's ``loss.backward()`` gives a leaf that requires grad a gradient that is a graph
itself, so that ``x.grad`` can be differentiated again (the course's gradient-of-gradient check,
Hessian-vector products). Building that graph costs a Tensor node per gradient op on every
training step, for a graph almost no loop differentiates. So ``backward()`` computes the
gradients as arrays, and each such leaf's ``.grad`` is one :class:`GradientTensor` node: it
holds the value, its inputs are the leaves it depends on, and the gradient graph the course's
backward would have built is made only when a later ``backward()`` goes through it.

What keeps the graph: the gradients refer to the forward graph only weakly, so a leaf and its
``.grad`` form no reference cycle, and a loop that rebinds its weights (``W = Tensor(W.numpy()
- lr * W.grad.numpy())``) frees each step's graph at once. If the tensor ``backward()`` was
called on is freed while a gradient still lives (``f(x).backward()`` inline), the gradients
keep a copy of the graph's recipe (ops and arrays, the leaves weakly), made as it goes, so a
gradient can still be differentiated. A loop that clears its gradients before the next forward
pass (``opt.reset_grad()``) never pays for that copy. ``backward(create_graph=True)`` keeps the
graph itself alive through the gradients, as PyTorch's does.

Example:
    >>> import needle as ndl
    >>> x = ndl.Tensor([3.0])
    >>> y = x * x * x
    >>> y.backward()
    >>> type(x.grad.op).__name__, x.grad.numpy().tolist()  # 3 x^2
    ('GradientGraph', [27.0])
    >>> x.grad.backward()  # d(3 x^2)/dx = 6 x
    >>> x.grad.numpy().tolist()
    [18.0]
"""
from __future__ import annotations

import weakref

from . import autograd, live_buffers
from .backend_ndarray import NDArray
from .graph_observers import THREAD
from .grad_mode import enable_grad

GRAPH_KEEPERS = autograd.GRAPH_KEEPERS


class GradientGraphs:
    """The gradient graphs of one ``backward()``, built once, on first need, for all its leaves.

    ``keep_graph``: hold the forward graph (through the output) for as long as a gradient lives.
    Otherwise the output is held weakly; when it is freed first, :meth:`keep_recipe` takes
    the graph's recipe (see :class:`GraphRecipe`).
    """

    __slots__ = (
        "_output", "_output_ref", "out_grad", "_leaf_refs", "_by_leaf", "_node_of_leaf", "_recipe", "_retired",
        "__weakref__",
    )

    def __init__(self, output, out_grad, leaves, keep_graph):
        self._output = output if keep_graph else None
        self._output_ref = weakref.ref(output)
        self.out_grad = out_grad  # a Tensor: the seed, a graph itself when it requires grad
        leaf_refs = self._leaf_refs = {}
        for leaf in leaves:  # NOTE: a loop: a comprehension is a call of its own
            leaf_refs[id(leaf)] = weakref.ref(leaf)
        self._by_leaf = self._node_of_leaf = None
        self._recipe = None
        self._retired = False
        if not keep_graph:
            GRAPH_KEEPERS[id(output)] = weakref.ref(self)

    def __del__(self):
        try:
            if not self._retired:  # a retired one has unregistered already
                self._unregister()
        except (AttributeError, TypeError):
            pass  # never initialised, or interpreter shutdown

    def _unregister(self):
        """Stop being told of the output's death (leaving a later backward()'s registration for it)."""
        output = self._output_ref()
        if output is None:
            return
        entry = GRAPH_KEEPERS.get(id(output))
        if entry is not None and entry() in (None, self):
            del GRAPH_KEEPERS[id(output)]

    def retire(self):
        """An optimizer is about to update leaves of this graph in place: its gradients can no
        longer be differentiated (the graph would mix old and new values), and no recipe is kept."""
        if self._retired:
            return
        self._retired = True
        self._unregister()
        self._output = self._recipe = None

    def keep_recipe(self, output):
        """Called by the dying ``output`` (``Value.__del__``): keep what building the graphs needs."""
        if self._by_leaf is None:
            self._recipe = GraphRecipe(output, self._leaf_refs)

    def depends_on(self):
        """The values the gradients depend on: the graph's leaves that require grad, and a seed
        that does."""
        leaves = tuple(leaf for leaf in (ref() for ref in self._leaf_refs.values()) if leaf is not None)  # a freed one gets none
        out_grad = self.out_grad
        if not out_grad.requires_grad or any(leaf is out_grad for leaf in leaves):
            return leaves  # NOTE: a seed that is also a leaf of the graph is listed once
        return leaves + (out_grad,)

    def of(self, leaf):
        """The gradient graph of the output with respect to ``leaf`` (built on the first call)."""
        return self.of_leaf_ref(weakref.ref(leaf))

    def of_leaf_ref(self, leaf_ref):
        """:meth:`of` the leaf ``leaf_ref`` refers to, also after that leaf has been freed (its
        gradient graph still reaches the other leaves)."""
        if self._by_leaf is None:
            from .backward import find_topo_sort, gradient_graphs

            if self._retired:
                raise RuntimeError(
                    "cannot differentiate this gradient: an optimizer step has updated the "
                    "parameters of its graph in place since backward(), so the graph would mix old "
                    "and new values. Differentiate gradients before opt.step()."
                )
            output, self._node_of_leaf = self._output_ref(), {}
            if output is None:
                if self._recipe is None:
                    raise RuntimeError(
                        "cannot differentiate this gradient: the graph it was computed from has been "
                        "freed; call backward(create_graph=True) to make the gradients keep it"
                    )
                output, self._node_of_leaf = self._recipe.rebuild()
                self._recipe = None
            order = find_topo_sort([output], prune_constants=True)
            self._by_leaf = gradient_graphs(output, self.out_grad, order)
        node = self._node_of_leaf.get(id(leaf_ref))
        return self._by_leaf[leaf_ref() if node is None else node]


def retire_graphs_of(gradients) -> None:
    """Retire the gradient graphs behind ``gradients`` (the ``.grad`` of parameters an optimizer
    is about to update in place; see :meth:`GradientGraphs.retire`)."""
    for gradient in gradients:
        op = gradient.op
        if op.__class__ is GradientGraph and not op.graphs._retired:
            op.graphs.retire()


class GraphRecipe:
    """A forward graph as ops and arrays, its leaves that require grad held weakly: what
    rebuilding it for a gradient graph needs, without the reference cycle that keeping the
    nodes would make (leaf -> .grad -> graph -> leaf). Holds its arrays' buffers (live bytes)."""

    __slots__ = ("steps", "_tokens")

    def __init__(self, output, leaf_refs):
        from .backward import find_topo_sort

        order = find_topo_sort([output], prune_constants=True)
        position = {node: index for index, node in enumerate(order)}
        steps, arrays = [], []
        for node in order:
            if node.op is None:
                leaf_ref = leaf_refs.get(id(node)) or weakref.ref(node)  # the gradients' own references
                steps.append((None, leaf_ref, node.cached_data, node.__class__))
            else:
                inputs = tuple(position[x] if x in position else x for x in node.inputs)  # constants as they are
                steps.append((node.op, inputs, node.cached_data, node.__class__, node._computed_at))
            arrays.append(node.cached_data)
        self.steps = steps
        self._tokens = [live_buffers.hold_all(array) for array in arrays]

    def __del__(self):
        try:
            for token in self._tokens:
                live_buffers.release(token)
        except (AttributeError, TypeError):
            pass

    def rebuild(self):
        """Fresh nodes with the recorded ops and arrays over the live leaves: ``(output, {id of
        the weak reference of a freed leaf: the leaf made in its place})``."""
        nodes, stand_ins = [], {}
        for step in self.steps:
            if step[0] is None:
                _, leaf_ref, data, cls = step
                leaf = leaf_ref()
                if leaf is None:
                    leaf = stand_ins[id(leaf_ref)] = cls.make_const(data, requires_grad=True)
                nodes.append(leaf)
                continue
            op, inputs, data, cls, computed_at = step
            node = cls.__new__(cls)
            autograd._fill(node, op, [nodes[x] if x.__class__ is int else x for x in inputs], data, True)
            node._spent = None
            node._computed_at = node._data_set_at = computed_at  # stale inputs are still caught
            nodes.append(node)
        return nodes[-1], stand_ins


class GradientGraph(autograd.TensorOp):
    """The op of a ``backward()``'s leaf gradients (one for all of them): ``d output / d leaf``,
    differentiated through the gradient graph it stands for (the node names its leaf)."""

    def __init__(self, graphs: GradientGraphs):
        self.graphs = graphs

    def _graph(self, node):
        return self.graphs.of_leaf_ref(node._leaf_ref)

    def compute(self, *depends_on):
        raise RuntimeError("a GradientGraph node is made with its value; it is never computed from its inputs")

    def gradient(self, out_grad, node):
        return _building(lambda: _vector_jacobian_product(self._graph(node), out_grad, node.inputs))

    def gradient_data(self, out_grad, node):
        def arrays():
            adjoint = autograd.Tensor.make_const(out_grad)
            grads = _vector_jacobian_product(self._graph(node), adjoint, node.inputs)
            return tuple(None if g is None else g.realize_cached_data() for g in grads)

        return _building(arrays)


class GradientTensor(autograd.Tensor):
    """A leaf's gradient from the course's ``backward()``: ``inputs`` are read from its
    :class:`GradientGraphs`, so that it refers to no leaf itself (its leaf only weakly)."""

    __slots__ = ("_leaf_ref",)

    @property
    def inputs(self):
        return self.op.graphs.depends_on()

    @inputs.setter
    def inputs(self, value):
        pass  # made with no inputs of its own (see gradient_tensor)

    def __reduce_ex__(self, protocol):
        # NOTE: pickled (and deep-copied) as its value, a constant: the links to its graph are
        # weak references, which neither pickle nor a copy could carry to a new graph.
        return (_constant_gradient, (self.realize_cached_data(),))


def _constant_gradient(data):
    """A pickled :class:`GradientTensor`, restored as the constant Tensor of its value."""
    return autograd.Tensor.make_const(data)


def gradient_tensor(op: GradientGraph, leaf, value: NDArray):
    """The ``.grad`` of ``leaf``: a node holding ``value``, differentiable through ``op.graphs``."""
    node = GradientTensor.__new__(GradientTensor)
    autograd._fill(node, op, (), value, True)
    node._leaf_ref = op.graphs._leaf_refs[id(leaf)]
    node._spent = None  # made by a backward(): neither spent nor wasted
    for observer in THREAD.observers:
        observer.node_made(node)
    return node


def _vector_jacobian_product(gradient, adjoint, wrt):
    """For each value of ``wrt``, the gradient graph of ``sum(adjoint * gradient)`` (None where none reaches)."""
    from .backward import find_topo_sort, gradient_graphs

    order = find_topo_sort([gradient], prune_constants=True)
    grads = gradient_graphs(gradient, adjoint, order)
    return tuple(grads.get(x) for x in wrt)


def _building(build):
    """Run ``build`` with gradients enabled, its nodes marked as a backward's (not forward graphs)."""
    previous = THREAD.in_backward
    THREAD.in_backward = True
    try:
        with enable_grad():
            return build()
    finally:
        THREAD.in_backward = previous
