"""An optimizer's scalars on the device, one row per coming step, for a replayed CUDA graph.

A CUDA graph replays its kernels with the arguments they were captured with, so the scalars of
an optimizer update that change between steps (``opt.lr``, Adam's bias corrections) cannot be
kernel arguments. The update kernels a graph replays read them on the device instead, from row
``row[0]`` of ``values`` (:func:`needle.backend_ndarray.cuda_kernels.multi_tensor`,
``from_table=True``); where each step has its own scalars (Adam) the graph moves ``row`` on
after its updates.

The scalars themselves are computed on the host, at every replay, by the optimizer's own code,
as its eager step computes them, so a replay's update is bitwise the eager one. Before each
launch, :meth:`ScalarTable.before_launch` compares them with the row the launch will read (the
host keeps a copy of every row): equal, the usual case, and nothing is copied; different (the
first replay, a changed ``opt.lr``, the rows used up), the rows are written anew from this step
on and the row set back to 0, in one upload ordered on the stream before the launch.

Example (numpy stands in for the device):
    >>> import numpy
    >>> def upload(device, host): device[...] = host
    >>> table = ScalarTable(numpy, numpy.float32, width=2, rows=3, upload=upload, advances=True)
    >>> table.before_launch((0.5, 0.25), upcoming=lambda k: (0.5 / (k + 1), 0.25))  # written: a copy
    True
    >>> table.values.tolist(), table.row.tolist()
    ([[0.5, 0.25], [0.25, 0.25], [0.1666666716337204, 0.25]], [0])
    >>> table.row[0] += 1  # what the graph's last kernel does
    >>> table.before_launch((0.25, 0.25), upcoming=None)  # the row the launch reads holds them already
    False
"""
import numpy

ROWS_AHEAD = 512  # rows written at once where every step has its own scalars (Adam): one upload per 512 steps


class ScalarTable:
    """The device rows an update's kernels read, the row they read, and the host's copy of both.

    Args:
        xp: the array module of the device (CuPy).
        dtype: the parameters' float dtype (the rows hold the scalars as the kernels' ``T``).
        width: scalars per row.
        rows: rows kept; 1 where the scalars are the same every step unless changed (SGD).
        upload: ``upload(device_array, host_array)`` copies host values into a device array,
            ordered on the stream the replays launch on.
        advances: whether each launch moves the row on (the graph holds :meth:`CupyKernels.next_table_row`).
    """

    def __init__(self, xp, dtype, width, rows, upload, advances):
        # NOTE: empty, not zeros: made while a stream captures, zeros would be a memset that
        # every replay repeats. The first before_launch writes both.
        self.values = xp.empty((rows, width), dtype=dtype)
        self.row = xp.empty(1, dtype=numpy.int64)
        self.dtype = numpy.dtype(dtype)
        self.advances = advances
        self._upload = upload
        self._written = [None] * rows  # each row's scalars as the host computed them (None: not written)
        self._next = rows  # the row the next launch reads, as the host counts it (past the end: write first)

    def before_launch(self, scalars, upcoming):
        """Make the row the next launch reads hold ``scalars`` (a tuple of Python numbers).

        ``upcoming(k)`` gives the scalars of the step ``k`` steps after this one, as they would
        be if nothing changed (for the rows written ahead; unused when the table has one row).
        Returns whether it uploaded.
        """
        row, written = self._next, self._written
        uploaded = row >= len(written) or written[row] != scalars
        if uploaded:
            rows = [tuple(scalars)] + [tuple(upcoming(k)) for k in range(1, len(written))]
            self._upload(self.values, numpy.array(rows, dtype=self.dtype))
            self._upload(self.row, numpy.zeros(1, dtype=numpy.int64))
            self._written, row = rows, 0
        self._next = row + 1 if self.advances else row
        return uploaded
