"""Reverse-mode differentiation over the graph: topological order, then adjoints summed per node."""
import operator
from functools import reduce


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


def compute_gradient_of_variables(output_tensor, out_grad):
    """Store in ``.grad`` of every node that needs it the gradient of ``output_tensor``.

    Gradients are Tensor graphs themselves (the course's semantics), so the gradient of a
    gradient can be taken. Returns the nodes traversed, in topological order.
    """
    grads_by_node = {output_tensor: [out_grad]}
    order = find_topo_sort([output_tensor], prune_constants=True)
    for node in reversed(order):
        grad = sum_node_list(grads_by_node.pop(node))
        if node.op is None:
            node.grad = grad
            continue
        # NOTE: an inner node keeps its gradient's value, detached: the gradient graph refers to
        # the nodes that use this one, so keeping the graph would make a reference cycle that
        # only the garbage collector could free. Leaves keep the graph (gradient of gradient).
        node.grad = grad.detach()
        for x, grad in zip(node.inputs, node.op.gradient_as_tuple(grad, node)):
            if x.requires_grad:
                grads_by_node.setdefault(x, []).append(grad)
    return order


def compute_gradient_data(output_tensor, out_grad, make_leaf_grad):
    """The fast path of ``backward(create_graph=False)``: arrays only, no graph built.

    Only leaves that require a gradient get ``.grad`` (made by ``make_leaf_grad``); inner nodes
    keep none, so nothing of the backward pass outlives it. Returns the nodes traversed.
    """
    grads_by_node = {output_tensor: out_grad}
    order = find_topo_sort([output_tensor], prune_constants=True)
    for node in reversed(order):
        grad = grads_by_node.pop(node)
        op = node.op
        if op is None:
            node.grad = make_leaf_grad(grad)
            continue
        for x, input_grad in zip(node.inputs, op.gradient_data(grad, node)):
            if input_grad is None or not x.requires_grad:
                continue
            previous = grads_by_node.get(x)
            grads_by_node[x] = input_grad if previous is None else _add_grads(previous, input_grad)
    return order


def _add_grads(previous, grad):
    """Sum two array gradients; a TensorTuple's gradients (tuples of arrays) add item by item."""
    if isinstance(previous, tuple):
        return tuple(p + g for p, g in zip(previous, grad))
    return previous + grad
