"""The fix a leak warning suggests, rebuilt from the user's own line: one case per shape of line."""
import sys

import pytest

from trainers.diagnosis.adding_line import find_adding_line
from trainers.diagnosis.evidence import Finding
from trainers.diagnosis.report import (
    GENERIC_FIX,
    accumulation_fix,
    carried_state_fix,
    container_fix,
    graph_leak_message,
    megabytes,
    no_grad_message,
    wasted_graph_message,
)

NO_GRAD = "or update it under `with needle.no_grad():`."
PER_BATCH = "once per batch, before it is fed to the next forward (truncated back-propagation through time)"


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"), (999, "999 B"), (1000, "1.00 KB"), (-2500, "-2.50 KB"), (999_999, "1000.00 KB"),
    (1e6, "1.00 MB"), (35e6, "35.00 MB"), (1e9, "1.00 GB"), (2.5e9, "2.50 GB"),
])
def test_byte_counts_read_in_the_unit_that_fits(nbytes, text):
    assert megabytes(nbytes) == text


# ---- an accumulation: the line that adds this iteration's graph to a running total ----------------
@pytest.mark.parametrize("line, scalar, fix", [
    ("total += loss", True,
     f"accumulate a detached value: `total += loss.detach()` (or a Python number: `total += float(loss.numpy())`), {NO_GRAD}"),
    ("  total -= a * b  ", False,
     f"accumulate a detached value: `total -= (a * b).detach()` (or a Python number: `total -= (a * b).numpy()`), {NO_GRAD}"),
    ("score *= model(x)", True,
     "accumulate a detached value: `score *= model(x).detach()` (or a Python number: "
     f"`score *= float(model(x).numpy())`), {NO_GRAD}"),
    ('ratio /= stats["n"]', True,
     'accumulate a detached value: `ratio /= stats["n"].detach()` (or a Python number: '
     f'`ratio /= float(stats["n"].numpy())`), {{NO_GRAD}}'.replace("{NO_GRAD}", NO_GRAD)),
    ("total //= loss*2", True,
     "accumulate a detached value: `total //= (loss*2).detach()` (or a Python number: "
     f"`total //= float((loss*2).numpy())`), {NO_GRAD}"),
    ("total @= m", False,
     f"accumulate a detached value: `total @= m.detach()` (or a Python number: `total @= m.numpy()`), {NO_GRAD}"),
    ("self.total += out.loss", False,
     "accumulate a detached value: `self.total += out.loss.detach()` (or a Python number: "
     f"`self.total += out.loss.numpy()`), {NO_GRAD}"),
    ("total = total + loss", True,
     "accumulate a detached value: `total = total + loss.detach()` (or a Python number: "
     f"`total = total + float(loss.numpy())`), {NO_GRAD}"),
    ("total = total + a * b", False,
     "accumulate a detached value: `total = total + (a * b).detach()` (or a Python number: "
     f"`total = total + (a * b).numpy()`), {NO_GRAD}"),
    ("total = loss + total", True,
     f"keep the result detached: `total = (loss + total).detach()` (or a Python number via `float(t.numpy())`), {NO_GRAD}"),
    ("total = total - loss", True,
     f"keep the result detached: `total = (total - loss).detach()` (or a Python number via `float(t.numpy())`), {NO_GRAD}"),
    ("h = cell(x, h)", True,
     f"keep the result detached: `h = (cell(x, h)).detach()` (or a Python number via `float(t.numpy())`), {NO_GRAD}"),
])
def test_an_accumulation_is_fixed_on_its_own_line(line, scalar, fix):
    assert accumulation_fix(line, scalar) == fix


@pytest.mark.parametrize("line", ["a = b = loss", "total += (loss +", "total += a; total += b", "losses.append(loss)", ""])
def test_a_line_that_is_no_single_accumulation_gets_the_general_words(line):
    assert accumulation_fix(line) == GENERIC_FIX


def test_the_scalar_choice_defaults_to_a_python_number():
    assert "`total += float(loss.numpy())`" in accumulation_fix("total += loss")


# ---- a state carried into the next forward ----------------------------------------------------------
def test_a_carried_state_is_detached_by_the_names_that_carry_it():
    assert carried_state_fix(Finding("carried_state", None, holders=("h", "c"))) == (
        f"detach the state {PER_BATCH}: `h, c = h.detach(), c.detach()`."
    )
    assert carried_state_fix(Finding("carried_state", None, holders=("h",))) == f"detach the state {PER_BATCH}: `h = h.detach()`."
    assert carried_state_fix(Finding("carried_state", None, holders=("state",), state_is_tuple=True)) == (
        f"detach the state {PER_BATCH}: `state = tuple(s.detach() for s in state)`."
    )


@pytest.mark.parametrize("line, fix", [
    ("hidden = cell(x, hidden)", f"detach the state {PER_BATCH}: `hidden = hidden.detach()`."),
    ("self.memory = step(self.memory)", f"detach the state {PER_BATCH}: `self.memory = self.memory.detach()`."),
    ("h, c = lstm(x, (h, c))", f"detach the carried state {PER_BATCH}, e.g. `h = h.detach()` (or `h = tuple(s.detach() for s in h)`)."),
    ("a = b = cell(x)", f"detach the carried state {PER_BATCH}, e.g. `h = h.detach()` (or `h = tuple(s.detach() for s in h)`)."),
    ("h += cell(x)", f"detach the carried state {PER_BATCH}, e.g. `h = h.detach()` (or `h = tuple(s.detach() for s in h)`)."),
])
def test_a_carried_state_without_names_is_detached_on_the_assigning_line(tmp_path, line, fix):
    source = tmp_path / "loop.py"
    source.write_text(f"x = 1\n{line}\n")
    assert carried_state_fix(Finding("carried_state", (str(source), 2))) == fix


def test_a_carried_state_without_a_line_gets_the_general_words():
    assert carried_state_fix(Finding("carried_state", None)) == (
        f"detach the carried state {PER_BATCH}, e.g. `h = h.detach()` (or `h = tuple(s.detach() for s in h)`)."
    )


# ---- a container: the adding line as the user wrote it ---------------------------------------------
# Each helper holds one adding statement (never run: the finder reads the source and evaluates only
# the statement's target in the frame) and returns what the finder found for ``log``.
def appends_pair(log, step, loss):
    if log is None:
        log.append((step, loss))
    return find_adding_line(log, sys._getframe())


def appends_nested_pair(log, step, ce, loss):
    if log is None:
        log.append((step, (ce, loss)))
    return find_adding_line(log, sys._getframe())


def appends_dict(log, step, loss):
    if log is None:
        log.append({"step": step, "loss": loss})
    return find_adding_line(log, sys._getframe())


def appends_record(log, step, loss, Record=dict):
    if log is None:
        log.append(Record(step=step, loss=loss))
    return find_adding_line(log, sys._getframe())


def appends_positional_record(log, step, loss, Record=tuple):
    if log is None:
        log.append(Record(step, loss))
    return find_adding_line(log, sys._getframe())


def appends_item(log, step, loss):
    if log is None:
        log.append((step, loss.item()))
    return find_adding_line(log, sys._getframe())


def appends(log, loss):
    if log is None:
        log.append(loss)
    return find_adding_line(log, sys._getframe())


def stores_pair(log, i, step, loss):
    if log is None:
        log[i] = (step, loss)
    return find_adding_line(log, sys._getframe())


def stores(log, i, loss):
    if log is None:
        log[i] = loss
    return find_adding_line(log, sys._getframe())


def adds_in_place(log, loss):
    if log is None:
        log += [loss]
    return find_adding_line(log, sys._getframe())


def extends(log, losses):
    if log is None:
        log.extend(losses)
    return find_adding_line(log, sys._getframe())


def extends_left(log, ce, mse):
    if log is None:
        log.extendleft([ce, mse])
    return find_adding_line(log, sys._getframe())


def extends_by_tuple(log, ce, mse):
    if log is None:
        log.extend((ce,))
        log.extendleft((ce, mse))
    return find_adding_line(log, sys._getframe())


def appends_detached_pair(log, step, loss):
    if log is None:
        log.append((step, loss.detach()))
    return find_adding_line(log, sys._getframe())


def adds_a_name(log, losses):
    if log is None:
        log += losses
    return find_adding_line(log, sys._getframe())


def inserts(log, loss):
    if log is None:
        log.insert(0, loss)
    return find_adding_line(log, sys._getframe())


def sets_default(log, key, loss):
    if log is None:
        log.setdefault(key, loss)
    return find_adding_line(log, sys._getframe())


def test_the_tensor_inside_a_stored_tuple_is_the_one_made_a_number():
    adding = appends_pair([], 1, 2)
    assert container_fix(adding, True, (("index", 1),)) == (
        "store a Python number where the tensor sits: `log.append((step, loss.item()))`."
    )
    assert container_fix(adding, False, (("index", 1),)) == (
        "store a detached tensor where the tensor sits: `log.append((step, loss.detach()))`."
    )
    assert container_fix(adding, True, (("index", 0),)) == (
        "store a Python number where the tensor sits: `log.append((step.item(), loss))`."
    )


def test_the_path_leads_through_nested_tuples_dict_keys_and_constructor_arguments():
    assert container_fix(appends_nested_pair([], 1, 2, 3), True, (("index", 1), ("index", 1))) == (
        "store a Python number where the tensor sits: `log.append((step, (ce, loss.item())))`."
    )
    assert container_fix(appends_dict([], 1, 2), True, (("key", "loss"),)) == (
        "store a Python number where the tensor sits: `log.append({'step': step, 'loss': loss.item()})`."
    )
    assert container_fix(appends_record([], 1, 2), True, (("attr", "loss", 1),)) == (
        "store a Python number where the tensor sits: `log.append(Record(step=step, loss=loss.item()))`."
    )
    assert container_fix(appends_positional_record([], 1, 2), True, (("attr", "loss", 1),)) == (
        "store a Python number where the tensor sits: `log.append(Record(step, loss.item()))`."
    )


@pytest.mark.parametrize("helper, arguments, path", [
    (appends_pair, (1, 2), (("index", 2),)),  # past the tuple's end
    (appends_pair, (1, 2), (("index", None),)),  # the position is not known
    (appends_pair, (1, 2), (("key", "loss"),)),  # a tuple has no keys
    (appends_dict, (1, 2), (("key", "missing"),)),
    (appends_dict, (1, 2), (("index", 0),)),
    (appends_record, (1, 2), (("attr", "other", None),)),
    (appends_positional_record, (1, 2), (("attr", "loss", 2),)),  # past the last argument
    (appends_pair, (1, 2), (("attr", "loss", 1),)),  # a tuple is no constructor call
    (appends_item, (1, 2), (("index", 1),)),  # already a number: this line does not keep the graph
    (appends_nested_pair, (1, 2, 3), (("index", 1), ("index", 5))),
])
def test_a_path_the_line_does_not_spell_falls_back_to_the_method_fix(helper, arguments, path):
    fix = container_fix(helper([], *arguments), True, path)
    assert "where the tensor sits" not in fix
    assert fix.startswith("store a detached value, e.g. `log.append(")


def test_a_subscript_store_is_fixed_where_the_tensor_sits_or_as_a_whole():
    assert container_fix(stores_pair({}, 3, 1, 2), True, (("index", 1),)) == (
        "store a Python number where the tensor sits: `log[i] = (step, loss.item())`."
    )
    assert container_fix(stores({}, 3, 2), True) == (
        "store a detached value, e.g. `log[i] = loss.detach()` or `log[i] = float(loss.numpy())`."
    )
    assert container_fix(stores({}, 3, 2), False, (("index", 0),)) == (
        "store a detached value, e.g. `log[i] = loss.detach()` or `log[i] = loss.numpy()`."
    )


def test_each_way_of_adding_gets_its_own_fix():
    assert container_fix(appends([], 1), True) == (
        "store a detached value, e.g. `log.append(loss.detach())` or `log.append(float(loss.numpy()))`."
    )
    assert container_fix(appends([], 1), False) == (
        "store a detached value, e.g. `log.append(loss.detach())` or `log.append(loss.numpy())`."
    )
    assert container_fix(adds_in_place([], 1), True, (("index", 0),)) == "store detached values, e.g. `log += [loss.detach()]`."
    assert container_fix(extends([], [1]), True) == "store detached values, e.g. `log.extend(t.detach() for t in losses)`."
    assert container_fix(extends_left([], 1, 2), True) == "store detached values, e.g. `log.extendleft([ce.detach(), mse.detach()])`."
    assert container_fix(inserts([], 1), True) == "store a detached value, e.g. `log.insert(0, loss.detach())`."
    assert container_fix(sets_default({}, "k", 1), True) == (
        "store detached values (`t.detach()`) or Python numbers in `log`, not tensors with their graph."
    )


def test_tuples_stay_tuples_and_a_detached_part_is_not_the_culprit():
    assert container_fix(extends_by_tuple([], 1, 2), True) == "store detached values, e.g. `log.extend((ce.detach(),))`."
    assert container_fix(adds_a_name([], [1]), True) == "store detached values, e.g. `log += losses.detach()`."
    fix = container_fix(appends_detached_pair([], 1, 2), False, (("index", 1),))
    assert "where the tensor sits" not in fix


def test_without_an_adding_line_the_fix_is_general():
    assert container_fix(None, True, (("index", 1),)) == (
        "store detached values (`t.detach()`) or Python numbers (`float(t.numpy())`) in the container, "
        "not tensors with their graph."
    )


# ---- the warnings' head lines -----------------------------------------------------------------------
def test_the_leak_message_gives_the_rate_the_size_and_whether_backward_used_the_graphs(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text("total += loss\n")
    finding = Finding("accumulation", (str(source), 1), scalar=True)
    message = graph_leak_message(finding, (12.4, 2500, 1.0, True), 30, 400)
    assert message == (
        "graph leak: each iteration keeps about 12 graph nodes (2.50 KB) more alive after backward() has used them "
        "(iteration 30, 400 graph nodes alive); memory will grow until the run dies.\n"
        f"  {source}:1: total += loss\n"
        "  This line combines a tensor from an earlier iteration with this iteration's graph, so every past "
        "iteration's graph stays reachable through it.\n"
        f"  Fix: {accumulation_fix('total += loss')}"
    )
    every_fifth = graph_leak_message(finding, (12, 2500, 5.0, False), 30, 400)
    assert every_fifth.startswith(
        "graph leak: every 5 iterations, about 12 graph nodes (2.50 KB) more stay alive that no backward() has used "
    )
    assert graph_leak_message(finding, (12, 2500, 1.5, False), 30, 400).startswith("graph leak: every 2 iterations,")


def test_the_leak_message_of_a_carried_state_names_the_state_and_its_fix(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text("h = cell(x, h)\n")
    message = graph_leak_message(Finding("carried_state", (str(source), 1), holders=("h",)), (3, 10, 1, True), 5, 9)
    assert message.endswith(
        f"  {source}:1: h = cell(x, h)\n"
        "  This line computes a state that the next iteration feeds back into its forward pass; without detach() "
        "every past batch's graph stays reachable through it.\n"
        f"  Fix: detach the state {PER_BATCH}: `h = h.detach()`."
    )


def test_the_leak_message_of_a_container_names_it_its_adding_line_and_where_its_tensors_are_made(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text("loss = model(x)\nlog.append(loss)\n")
    finding = Finding("container", (str(source), 2), created_site=(str(source), 1), container_name="log", scalar=True)
    message = graph_leak_message(finding, (3, 10, 1, True), 5, 9, adding=appends([], 1))
    assert message.endswith(
        f"  {source}:2: log.append(loss)\n"
        "  The container `log` holds a tensor with its whole graph from every iteration.\n"
        f"  The tensors are made at {source}:1: loss = model(x)\n"
        "  Fix: store a detached value, e.g. `log.append(loss.detach())` or `log.append(float(loss.numpy()))`."
    )
    unnamed = graph_leak_message(Finding("container", None), (3, 10, 1, True), 5, 9)
    assert unnamed.endswith(
        "  (the line that adds to it was not found)\n"
        "  A container holds a tensor with its whole graph from every iteration.\n"
        f"  Fix: {container_fix(None, False)}"
    )


def test_the_leak_message_of_a_graph_held_elsewhere(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text("out = model(x)\n")
    message = graph_leak_message(Finding("held", (str(source), 1)), (3, 10, 1, True), 5, 9)
    assert message.endswith(
        f"  The retained graphs are made at {source}:1: out = model(x)\n"
        "  Something outside the loop keeps a reference to them.\n"
        "  Fix: keep `.detach()`ed tensors or Python numbers (`float(t.numpy())`) across iterations."
    )


def test_the_no_grad_messages_give_the_figures_the_line_and_the_fix(tmp_path):
    source = tmp_path / "evaluate.py"
    source.write_text("logits = model(x)\n")
    assert no_grad_message(41.6, 2_000_000, 3, (str(source), 1)) == (
        "no_grad missing: 3 iterations in a row ran a forward through trainable weights with grad mode on and no "
        "backward(): each built 42 graph nodes (2.00 MB) that no backward() will use.\n"
        f"  The model is called at {source}:1: logits = model(x)\n"
        "  Fix: wrap the evaluation loop in `with needle.no_grad():` (and call model.eval()); no graph is recorded there."
    )
    assert no_grad_message(41.6, 2_000_000, 3, None) == (
        "no_grad missing: 3 iterations in a row ran a forward through trainable weights with grad mode on and no "
        "backward(): each built 42 graph nodes (2.00 MB) that no backward() will use.\n"
        "  Fix: wrap the evaluation loop in `with needle.no_grad():` (and call model.eval()); no graph is recorded there."
    )
    assert wasted_graph_message(7.2, 1500, (str(source), 1)) == (
        "no_grad missing: a forward through the model's parameters ran with grad mode on, and its graph (7 graph nodes, "
        "1.50 KB) was freed without any backward() through it: an evaluation that records a graph for nothing.\n"
        f"  {source}:1: logits = model(x)\n"
        "  Fix: run that call under `with needle.no_grad():` (or decorate the evaluation helper with `@needle.no_grad`); "
        "no graph is recorded there."
    )
    assert "\n  (the line was not found)\n" in wasted_graph_message(7, 1500, None)
