"""A plan's calls written out as one generated Python function, the replay a single call.

A plan is built as a list of calls (``functools.partial`` objects, and a few callables of its
own: the optimizer's host step, guard checks). Replaying that list means a loop over the
partials, and for an input the replay reads in place (:mod:`needle.compiler.input_binding`)
new partials every replay. :func:`replay_function` writes the same calls, in the same order,
as the body of one function: the calls' functions and arrays are its closure's constants, and
each input read in place is a parameter, so a replay passes the caller's arrays and makes the
calls with nothing in between. (Measured on the benchmark MLP at H=128/batch 32 in a
DataLoader loop: 307 against 315 us a step for the loop over partials; docs/benchmarks.md.)

Example:
    >>> import functools, numpy as np
    >>> out = np.zeros(2)
    >>> calls = [functools.partial(np.add, np.ones(2), np.ones(2), out), functools.partial(np.multiply, out, 3.0, out)]
    >>> replay = replay_function(calls, {})
    >>> replay(); out.tolist()
    [6.0, 6.0]
"""
import functools


# NOTE: Python compiles a function of n closure variables in time growing as about n^2 (20,000
# calls took 8 s as one function, 0.3 s in pieces), so a long plan is written as several
# functions of at most this many calls, called in turn by one more.
_CALLS_PER_FUNCTION = 256


def replay_function(runs, parameters):
    """A function making the calls of ``runs`` in order.

    Args:
        runs: the plan's calls; a ``functools.partial`` is written out as its function called
            with its arguments, anything else is called with none.
        parameters: ``{position in runs: {argument index: (parameter index, transposed)}}``:
            the arguments that are the function's parameters instead of constants (an input
            read in place, or its transpose).

    Returns:
        a function of as many positional arguments as ``parameters`` names.
    """
    count = 1 + max((index for sites in parameters.values() for index, _ in sites.values()), default=-1)
    inputs = ", ".join(f"i{index}" for index in range(count))
    pieces = []
    for start in range(0, len(runs), _CALLS_PER_FUNCTION):
        stop = start + _CALLS_PER_FUNCTION
        piece_parameters = {position - start: sites for position, sites in parameters.items() if start <= position < stop}
        pieces.append(_written_out(runs[start:stop], piece_parameters, inputs))
    if len(pieces) == 1:
        return pieces[0]
    return _function([f"{{}}({inputs})"] * len(pieces), [[piece] for piece in pieces], inputs)


def _written_out(runs, parameters, inputs):
    """One generated function of ``inputs`` making the calls of ``runs`` (see :func:`replay_function`)."""
    lines, constants = [], []  # per call: its line, with ``{}`` for each constant, and those constants
    for position, run in enumerate(runs):
        if run.__class__ is not functools.partial:
            lines.append("{}()")
            constants.append([run])
            continue
        substituted = parameters.get(position, {})
        arguments, values = [], [run.func]
        for index, argument in enumerate(run.args):
            if index in substituted:
                parameter, transposed = substituted[index]
                arguments.append(f"i{parameter}.T" if transposed else f"i{parameter}")
            else:
                arguments.append("{}")
                values.append(argument)
        for name, value in run.keywords.items():
            arguments.append(f"{name}={{}}")
            values.append(value)
        lines.append(f"{{}}({', '.join(arguments)})")
        constants.append(values)
    return _function(lines, constants, inputs)


def _function(lines, constants, inputs):
    """The function of ``inputs`` whose body is ``lines``, each line's ``{}`` standing for its
    constants in turn, which the function holds as closure variables."""
    names = (f"c{index}" for index in range(sum(map(len, constants))))
    body = ["        " + line.format(*(next(names) for _ in values)) for line, values in zip(lines, constants)]
    flat = [value for values in constants for value in values]
    source = (
        f"def make({', '.join(f'c{index}' for index in range(len(flat)))}):\n    def replay({inputs}):\n"
        + ("\n".join(body) or "        pass")
        + "\n    return replay\n"
    )
    namespace = {}
    exec(compile(source, "<ndl.compile replay>", "exec"), namespace)
    return namespace["make"](*flat)
