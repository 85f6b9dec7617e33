"""A replay reads the caller's batch in place; the caller may change its array afterwards."""
import numpy as np

import needle as ndl
from needle.backend_ndarray import NDArray

from steps import data, model_and_optimizer, state_arrays, step_function


def run(compiled, change_after_call, layout=np.ascontiguousarray):
    model, opt = model_and_optimizer()
    step = step_function(model, opt)
    step = ndl.compile(step) if compiled else step
    images, labels = data()
    np.random.seed(1)
    losses = []
    for index in range(6):
        x = images[index * 16 : index * 16 + 16].copy()
        x = layout(x) if index >= 2 else x  # the capture's batches are C-ordered
        y = labels[index * 16 : index * 16 + 16].copy()
        tensor_x, tensor_y = ndl.Tensor.make_const(NDArray.wrap(x, ndl.cpu())), ndl.Tensor(y)
        losses.append(step(tensor_x, tensor_y))
        if change_after_call:
            tensor_x.cached_data.raw[...] = 7.0  # the caller reuses its arrays for the next batch
            tensor_y.cached_data.raw[...] = 3
    return [loss.numpy().tobytes() for loss in losses], state_arrays(model, opt), step


def test_the_replay_reads_the_callers_batch_where_it_is():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    images, labels = data()
    batch = [(ndl.Tensor(images[i : i + 16]), ndl.Tensor(labels[i : i + 16])) for i in (0, 16)]
    step(*batch[0])
    step(*batch[1])
    binding = next(iter(step._plans.values())).plan.bindings[0]
    assert binding is not None and binding.bound is batch[1][0].cached_data.raw


def test_changing_the_batch_after_the_call_changes_nothing():
    for change in (False, True):
        eager_losses, eager_state, _ = run(False, change)
        losses, state, step = run(True, change)
        assert step.replays == 5
        assert losses == eager_losses
        assert all(eager_state[name].tobytes() == state[name].tobytes() for name in eager_state)


def test_a_batch_of_another_layout_is_copied():
    eager_losses, eager_state, _ = run(False, False, layout=np.asfortranarray)
    losses, state, step = run(True, False, layout=np.asfortranarray)
    binding = next(iter(step._plans.values())).plan.bindings[0]
    assert binding is not None and binding.bound is binding.buffer  # the Fortran-ordered batch was copied
    assert losses == eager_losses
    assert all(eager_state[name].tobytes() == state[name].tobytes() for name in eager_state)


def test_every_batch_of_a_dataloader_loop_is_read_in_place():
    """Each replay binds the new batch: a buffer the capture made and freed leaves its id behind,
    and a new batch given that id is still the caller's (not a copy of it every other step)."""
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    images, labels = data()
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(images, labels), 16, shuffle=True, drop_last=True)
    bound = []
    for epoch in range(3):
        for x, y in loader:
            step(x, y)
            binding = next(iter(step._plans.values())).plan.bindings[0]
            bound.append(binding.bound is x.cached_data.raw)
    assert step.replays >= 8 and all(bound[1:]), bound  # the first call captured


def test_a_freed_buffer_of_the_plan_does_not_stand_for_a_new_array():
    from needle.compiler.input_binding import InputBinding, weak_buffers

    kept, freed = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    owned = weak_buffers({id(kept), id(freed), 12345}, {id(kept): kept, id(freed): freed})
    binding = InputBinding(np.zeros((2, 3), np.float32), (), owned)
    assert not binding.accepts(kept) and not binding.accepts(kept[1:]), "the plan's own buffer (or a view of it) is copied"
    newcomer = np.ones((2, 3), np.float32)
    owned[id(newcomer)] = owned.pop(id(freed))  # as if ``newcomer`` had been given the freed buffer's id
    del freed
    assert binding.accepts(newcomer)
    assert owned[12345] is None  # a buffer the plan cannot name: an array with its id would be copied


def test_the_replay_function_takes_the_inputs_read_in_place_as_parameters():
    import functools

    from needle.compiler.replay_function import replay_function

    buffer, weight, out, total = np.zeros((2, 3)), np.arange(6.0).reshape(3, 2), np.zeros((2, 2)), np.zeros((3, 3))
    calls = [
        functools.partial(np.matmul, buffer, weight, out),  # reads the input
        functools.partial(np.matmul, buffer.T, buffer, total),  # reads it twice, once transposed
        functools.partial(np.multiply, out, 2.0, out=out),  # a keyword argument stays a constant
    ]
    replay = replay_function(calls, {0: {0: (0, False)}, 1: {0: (0, True), 1: (0, False)}})
    batch = np.arange(6.0).reshape(2, 3)
    replay(batch)
    np.testing.assert_array_equal(out, 2 * (batch @ weight))
    np.testing.assert_array_equal(total, batch.T @ batch)
    assert not buffer.any(), "the buffer is not read or written when the batch is passed in its place"


def test_a_long_plan_is_written_out_in_pieces_that_run_in_order():
    import functools

    from needle.compiler import replay_function as module

    total, step = np.zeros(1), np.ones(1)
    calls = [functools.partial(np.add, total, step, total) for _ in range(3 * module._CALLS_PER_FUNCTION + 5)]
    calls.append(functools.partial(np.multiply, total, 2.0, total))  # last: the order matters
    every_tenth = {position: {1: (0, False)} for position in range(0, len(calls) - 1, 10)}
    replay = module.replay_function(calls, every_tenth)
    replay(np.full(1, 3.0))
    expected = 2 * (len(calls) - 1 + 2 * len(every_tenth))
    assert total[0] == expected
