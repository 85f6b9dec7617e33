"""Live bytes, counted per buffer: the memory needle keeps, each buffer once.

A buffer is the flat block of memory an array and all its views share (the course's
``_handle``). needle *holds* a buffer while something it keeps refers to it: the array of a
live Value (``cached_data``), a view of that array, or an array an op saved for its backward
pass (:meth:`needle.autograd.Op.save_for_backward`). The buffer's bytes are added to its
device's counter when the first holder takes it, and taken off when the last one lets go, so
views, detached copies that share data (``detach()``, a ``TupleGetItem``, one gradient given to
several nodes) and saved arrays count exactly once, and a view whose owner nobody else keeps
(a reshape of a temporary) counts its whole buffer.

On the CPU the buffer is the numpy array that owns the memory (the end of the ``.base``
chain), and its bytes are that array's ``nbytes``. On CUDA the buffer is CuPy's memory block
(``array.data.mem``, shared by all views, ``as_strided`` ones too) and its bytes the ``nbytes``
of the array that owns it (CuPy's pool rounds each block up to 512 bytes; that is not counted).

Every operation is O(1): one dictionary look-up keyed by the owner's identity. Only the
module's own functions change the counters.

Example:
    >>> import numpy as np
    >>> from needle.backend_ndarray import NDArray
    >>> from needle import live_buffers
    >>> before = live_buffers.BYTES_BY_DEVICE["cpu"]
    >>> array = NDArray(np.zeros(4, dtype="float32"))
    >>> whole, view = live_buffers.hold(array), live_buffers.hold(array[1:3])
    >>> live_buffers.BYTES_BY_DEVICE["cpu"] - before  # one buffer of 16 bytes, held twice
    16
    >>> live_buffers.release(whole); live_buffers.release(view)
    >>> live_buffers.BYTES_BY_DEVICE["cpu"] - before
    0
"""
import numpy

_NUMPY_ARRAY = numpy.ndarray

BYTES_BY_DEVICE = {"cpu": 0}  # device name -> bytes of the buffers held on it
_HELD = {}  # id(owner) -> its token, while the owner has holders

# A token is one list per held buffer, [holders, nbytes, device name, owner] (the owner kept so
# that its identity stays valid): a list, because making one is the cheapest thing Python does
# after a tuple, and every graph node makes or finds one.
HOLDERS, NBYTES, DEVICE, OWNER = range(4)


def hold(array):
    """Count ``array``'s buffer (an NDArray's) as held once more; returns the token for :func:`release`."""
    raw = array.raw
    if raw.__class__ is _NUMPY_ARRAY:
        owner = raw.base
        if owner is None:
            owner = raw
        elif owner.__class__ is not _NUMPY_ARRAY or owner.base is not None:
            owner = _numpy_owner(raw)
    else:
        owner = _device_owner(raw)
    token = _HELD.get(id(owner))
    if token is not None:
        token[0] += 1
        return token
    nbytes = owner.nbytes if owner.__class__ is _NUMPY_ARRAY else _device_nbytes(raw, owner)
    device = array.device.name
    token = _HELD[id(owner)] = [1, nbytes, device, owner]
    try:
        BYTES_BY_DEVICE[device] += nbytes
    except KeyError:
        BYTES_BY_DEVICE[device] = nbytes
    return token


def hold_all(data):
    """Hold the buffers of ``data`` (an NDArray or a nested tuple of them); returns a token or None."""
    if data.__class__ is not tuple:
        return hold(data) if hasattr(data, "raw") else None
    tokens = tuple(token for token in (hold_all(item) for item in data) if token is not None)
    return tokens or None


def release(token):
    """Let go of what :func:`hold` or :func:`hold_all` returned (None is accepted, and does nothing)."""
    if token is None:
        return
    if token.__class__ is tuple:
        for item in token:
            release(item)
        return
    token[0] -= 1
    if not token[0]:
        forget(token)


def forget(token):
    """Uncount a buffer whose last holder has let go (its holder count is 0): for inlined releases."""
    key = id(token[3])
    if _HELD.get(key) is token:
        del _HELD[key]
    BYTES_BY_DEVICE[token[2]] -= token[1]


def tally(token, counts):
    """Add the buffers behind ``token`` to ``counts`` (``{id(owner): [buffer, times seen]}``), for sizing sets of values."""
    if token is None:
        return
    for item in token if token.__class__ is tuple else (token,):
        if item.__class__ is tuple:
            tally(item, counts)
            continue
        entry = counts.get(id(item[OWNER]))
        if entry is None:
            counts[id(item[OWNER])] = [item, 1]
        else:
            entry[1] += 1


def tallied_bytes(counts, exclusive=False):
    """Bytes of the tallied buffers; with ``exclusive``, only of those whose every holder was tallied."""
    if exclusive:
        return sum(token[NBYTES] for token, seen in counts.values() if seen >= token[HOLDERS])
    return sum(token[NBYTES] for token, _ in counts.values())


def held_buffer_count():
    """How many distinct buffers are held now."""
    return len(_HELD)


def _numpy_owner(raw):
    """The numpy array at the end of ``raw``'s base chain (``as_strided`` puts a non-array in between)."""
    owner, node = raw, raw.base
    while node is not None:
        if isinstance(node, _NUMPY_ARRAY):
            owner = node
        node = getattr(node, "base", None)
    return owner


def _device_nbytes(raw, owner):
    """Bytes of a non-numpy buffer: those of the array that owns it (``raw``'s base, or ``raw``)."""
    if isinstance(owner, _NUMPY_ARRAY):
        return owner.nbytes
    base = getattr(raw, "base", None)
    return (raw if base is None else base).nbytes


def _device_owner(raw):
    """A CuPy array's memory block (shared by all its views, ``as_strided`` ones too); numpy subclasses as numpy."""
    if isinstance(raw, _NUMPY_ARRAY):
        return _numpy_owner(raw)
    memory = getattr(getattr(raw, "data", None), "mem", None)
    if memory is None:
        base = getattr(raw, "base", None)
        return raw if base is None else base
    return memory
