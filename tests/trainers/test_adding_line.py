"""The user line that adds to a container, found in the frames' source or caught as it runs."""
import sys
import types

import pytest

from trainers.diagnosis.adding_line import AddingLineWatcher, find_adding_line, name_held_in_frames

HERE = __file__


def line_of(function, text):
    """The line number of the first line of ``function``'s source that contains ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


# Each helper holds adding statements that never run (the finder reads the source and evaluates
# only each statement's target in the frame) and returns what the finder found.
def appends(log, loss):
    if log is None:
        log.append(loss)
    return find_adding_line(log, sys._getframe())


def detached_then_kept(log, loss):
    if log is None:
        log.append(loss.detach())
        log.append(float(loss))
        log.append(int(loss))
        log.append(loss.numpy())
        log.append(loss.tolist())
        log.append([loss.item(), 1])
        log.append(loss * 2)
    return find_adding_line(log, sys._getframe())


def only_detached(log, loss, max_frames=8):
    if log is None:
        log.append(loss.numpy())
    return find_adding_line(log, sys._getframe(), max_frames=max_frames)


GLOBAL_LOG = []


class CountingMapping:
    """A user object with ``__getitem__``: the finder must never call it."""

    def __init__(self):
        self.calls = 0
        self.inner = []

    def __getitem__(self, key):
        self.calls += 1
        return self.inner


def named_by_expressions(hist, box, key, loss, mapping=None):
    if hist is None:
        box.missing.append(loss)
        mapping["k"].append(loss)
        GLOBAL_LOG.append(loss)
        hist["train"]["loss"].append(loss)
        box.curve.append(loss)
        hist[key].append(loss)
        hist[key + "x"].append(loss)
        hist.get("train").append(loss)
    return sys._getframe()


def outer(log, loss):
    if log is None:
        log.append(loss)
    return inner(log)


def inner(log):
    return find_adding_line(log, sys._getframe())


def test_the_adding_line_is_found_with_its_site_expression_method_and_stored_text():
    log = []
    adding = appends(log, 1)
    assert adding.site == (HERE, line_of(appends, "log.append(loss)"))
    assert (adding.container_expression, adding.method, adding.key) == ("log", "append", None)
    assert [text for _, text in adding.arguments] == ["loss"]


def test_a_line_that_keeps_the_graph_wins_over_lines_that_detach():
    adding = detached_then_kept([], 1)
    assert [text for _, text in adding.arguments] == ["loss * 2"]
    assert adding.site[1] == line_of(detached_then_kept, "log.append(loss * 2)")
    fallback = only_detached([], 1)
    assert [text for _, text in fallback.arguments] == ["loss.numpy()"], "only a detaching line: it is still the answer"
    beyond_the_stack = only_detached([], 1, max_frames=10_000)  # the outermost frame is passed, then the search ends
    assert [text for _, text in beyond_the_stack.arguments] == ["loss.numpy()"]


def test_the_container_is_named_as_the_user_wrote_it():
    inner_list, curve, keyed = [], [], []
    hist = {"train": {"loss": inner_list}, "k": keyed, "kx": [], }
    box = types.SimpleNamespace(curve=curve)
    frame = named_by_expressions(hist, box, "k", 1)
    assert find_adding_line(inner_list, frame).container_expression == 'hist["train"]["loss"]'
    assert find_adding_line(curve, frame).container_expression == "box.curve"
    assert find_adding_line(keyed, frame).container_expression == "hist[key]"
    assert find_adding_line(hist["kx"], frame) is None, "a computed key is never evaluated"
    assert find_adding_line(GLOBAL_LOG, frame).container_expression == "GLOBAL_LOG", "a module global"
    mapping = CountingMapping()
    frame = named_by_expressions(hist, box, "k", 1, mapping)
    assert find_adding_line(mapping.inner, frame) is None and mapping.calls == 0, "no user code runs"
    assert find_adding_line([], frame) is None


def test_setitem_augmented_keyword_and_extend_lines(tmp_path):
    source = tmp_path / "ways.py"
    source.write_text(
        "import sys\n"
        "from trainers.diagnosis.adding_line import find_adding_line\n"
        "def store(log, i, loss):\n"
        "    if log is None:\n"
        "        log[i] = loss\n"
        "    return find_adding_line(log, sys._getframe())\n"
        "def add(log, loss):\n"
        "    if log is None:\n"
        "        log += [loss]\n"
        "    return find_adding_line(log, sys._getframe())\n"
        "def update(log, loss):\n"
        "    if log is None:\n"
        "        log.update(best=loss)\n"
        "    return find_adding_line(log, sys._getframe())\n"
        "def extend(log, loss, i):\n"
        "    if log is None:\n"
        "        log.extend(loss, more=i)\n"
        "    return find_adding_line(log, sys._getframe())\n"
        "def insert_one(log, loss):\n"
        "    if log is None:\n"
        "        log.insert(loss)\n"
        "    return find_adding_line(log, sys._getframe())\n"
        "def subtract(log, loss):\n"
        "    if log is None:\n"
        "        log -= loss\n"
        "    return find_adding_line(log, sys._getframe())\n"
    )
    namespace = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    stored = namespace["store"]({}, 3, 1)
    assert (stored.site, stored.method, stored.key, stored.container_expression) == ((str(source), 5), "__setitem__", "i", "log")
    assert [text for _, text in stored.arguments] == ["loss"]
    added = namespace["add"]([], 1)
    assert (added.site, added.method, added.key, [t for _, t in added.arguments]) == ((str(source), 9), "+=", None, ["[loss]"])
    updated = namespace["update"]({}, 1)
    assert (updated.method, [t for _, t in updated.arguments]) == ("update", ["loss"])
    extended = namespace["extend"]([], 1, 2)
    assert (extended.method, [t for _, t in extended.arguments]) == ("extend", ["loss", "i"])
    inserted = namespace["insert_one"]([], 1)
    assert (inserted.method, inserted.key, [t for _, t in inserted.arguments]) == ("insert", None, ["loss"])
    assert namespace["subtract"]([], 1) is None, "only += adds"


def test_the_adding_line_is_found_in_a_calling_frame_within_the_frame_limit():
    log = []
    adding = outer(log, 1)
    assert adding.site == (HERE, line_of(outer, "log.append(loss)"))
    frame = sys._getframe()
    assert find_adding_line(log, frame, max_frames=1) is None


def test_a_script_loop_is_read_from_its_whole_file(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "from trainers.diagnosis.adding_line import find_adding_line\n"
        "log = []\n"
        "if log is None:\n"
        "    log.append(loss)\n"
        "found = find_adding_line(log, sys._getframe())\n"
    )
    namespace = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    assert namespace["found"].site == (str(script), 5)
    assert namespace["found"].container_expression == "log"


def test_code_without_source_finds_nothing():
    namespace = {}
    exec("import sys\nlog = []\nlog.append(1)\nframe = sys._getframe()\n", namespace)
    assert find_adding_line(namespace["log"], namespace["frame"]) is None


def test_the_name_a_frame_knows_the_container_by():
    log = []
    by_name = {"train": [], ("not", "a", "name"): []}
    holder = types.SimpleNamespace(curve=[])
    frame = sys._getframe()
    # NOTE: the names are looked up before any assert: pytest's rewritten asserts keep values in locals
    names = [name_held_in_frames(container, frame)
             for container in (log, by_name["train"], by_name[("not", "a", "name")], holder.curve, [])]
    unknown_frame = name_held_in_frames(log, None)
    assert names == ["log", "by_name['train']", None, "holder.curve", None]
    assert unknown_frame is None


def name_seen_from_a_callee(boxed, frame_limit):
    return name_held_in_frames(boxed[0], sys._getframe(), max_frames=frame_limit)


def test_the_name_is_found_in_a_caller_within_the_frame_limit():
    log = []
    assert name_seen_from_a_callee([log], 2) == "log"
    assert name_seen_from_a_callee([log], 1) is None


# ---- the watcher: the adding line caught as it runs ------------------------------------------------
class Logger:
    def __init__(self):
        self.curve = []

    def log(self, loss):
        self.curve.append(loss)


def test_the_watcher_catches_the_line_that_grows_the_container():
    logger = Logger()
    watcher = AddingLineWatcher()
    assert not watcher.active
    assert watcher.start(logger.curve, sys._getframe())
    assert watcher.active and watcher.caught is None
    logger.log(1.0)
    logger.log(2.0)
    logger.curve.append(3.0)  # a later growth elsewhere: the first caught line stays
    watcher.stop()
    assert not watcher.active and sys.getprofile() is None
    caught = watcher.caught
    assert caught.site == (HERE, line_of(Logger.log, "self.curve.append(loss)"))
    assert (caught.container_expression, caught.method) == ("self.curve", "append")
    watcher.stop()  # a second stop does nothing


def test_the_watcher_leaves_a_profiler_alone():
    def profiler(frame, event, arg):
        return None

    sys.setprofile(profiler)
    try:
        watcher = AddingLineWatcher()
        assert watcher.start([], sys._getframe()) is False
        assert not watcher.active
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)


def test_the_watcher_catches_a_setdefault_chain_by_its_outer_call():
    scalars = {}
    series = scalars.setdefault("loss", [])
    watcher = AddingLineWatcher()
    watcher.start(series, sys._getframe())
    scalars.setdefault("loss", []).append(1.0)
    watcher.stop()
    assert watcher.caught.method == "append"
    assert watcher.caught.site[0] == HERE
    assert [text for _, text in watcher.caught.arguments] == ["1.0"]


def test_the_watcher_without_a_matching_statement_still_names_the_line():
    log = []
    watcher = AddingLineWatcher()
    watcher.start(log, sys._getframe())
    grow = log.__iadd__
    grow([1])  # a method-wrapper: no call event, the growth is seen at the next one, in this frame
    watcher.stop()
    assert watcher.caught.site[0] == HERE
    assert watcher.caught.container_expression is None and watcher.caught.arguments == []


def test_the_same_function_in_two_files_is_read_from_each_file(tmp_path):
    # NOTE: code objects of equal functions compare equal whatever their file: the parse cache
    # once named the first file for the second
    text = (
        "import sys\n"
        "from trainers.diagnosis.adding_line import find_adding_line\n"
        "def store(log, i, loss):\n"
        "    if log is None:\n"
        "        log[i] = loss\n"
        "    return find_adding_line(log, sys._getframe())\n"
    )
    sites = []
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        source = tmp_path / folder / "loop.py"
        source.write_text(text)
        namespace = {}
        exec(compile(text, str(source), "exec"), namespace)
        sites.append((namespace["store"]({}, 0, 1).site, (str(source), 5)))
    assert [found for found, _ in sites] == [expected for _, expected in sites]


def grows_in_place(log, loss):
    log += [loss]
    return len(log)


def test_the_watcher_catches_an_in_place_addition_seen_at_the_next_event():
    log = []
    watcher = AddingLineWatcher()
    watcher.start(log, sys._getframe())
    grows_in_place(log, 1.0)
    watcher.stop()
    assert watcher.caught.site == (HERE, line_of(grows_in_place, "log += [loss]"))
    assert (watcher.caught.container_expression, watcher.caught.method) == ("log", "+=")
