"""Where needle speaks the CMU Deep Learning Systems course's API: the map of every course-only name.

Code written for the course (its notebooks, homework solutions and local tests) runs against
needle unchanged. Most of the course's API is needle's own API; what exists only for the course
lives in the places below, each a thin module or a small block that says so.

Module paths (thin re-export modules, the definitions live beside them):

- ``needle.backend_selection``: ``NEEDLE_BACKEND`` (``nd`` or ``np``), ``BACKEND``, ``array_api``,
  ``NDArray``, ``Device``; the one decision it makes is the default dtype (``default_dtype``).
- ``needle.backend_numpy``: the course's numpy device module (``Device``, ``CPUDevice``, ``cpu``...).
- ``needle.backend_ndarray.ndarray_backend_numpy``: the course's device functions over flat
  handles (``Array``, ``compact``, ``ewise_add``, ``matmul``, ``reduce_sum``...).
- ``needle.data.data_basic``, ``needle.data.data_transforms``, ``needle.data.datasets``
  (``mnist_dataset``, ``ndarray_dataset``).
- ``needle.nn.nn_basic``, ``needle.ops.ops_mathematic`` / ``ops_logarithmic`` / ``ops_tuple``,
  ``needle.init.init_basic`` / ``init_initializers``: needle's own modules, under the course's names.

NDArray internals (the homework that builds NDArray defines them):
:mod:`needle.backend_ndarray.course_api` holds ``_handle``, ``_offset``, ``_strides``,
``_shape``, ``_device``, ``NDArray.make(shape, strides, device, handle, offset)``,
``compact_strides``, ``process_slice``, ``flat``, and the aliases ``cpu_numpy`` and
``BackendDevice``; :mod:`needle.backend_ndarray.handles` holds the device functions
(``device.ewise_add``, ``device.matmul_tiled``, ``device.__tile_size__``, ``device.Array``).
needle's own constructor from a raw array is ``NDArray.wrap(raw, device)``.

``backend_ndarray.array(a)`` always copies, as the course's does (the class ``NDArray(a)`` shares
an array it can, which needle's DataLoader uses to wrap batches without a copy).

Course spellings inside needle's modules (a re-export line each, marked "course names"):
``needle.autograd`` re-exports ``find_topo_sort``, ``topo_sort_dfs``,
``compute_gradient_of_variables``, ``array_api``, ``Device``, ``cpu``, ``all_devices``,
``default_device``; ``needle`` re-exports ``BACKEND``, ``array_api``, ``Device``, ``ones``,
``zeros``, ``ones_like``, ``zeros_like`` and every op function; ``needle.ops.ops_mathematic``
re-exports ``split``; ``Tensor.from_numpy`` is the course's helper on Tensor.

Deliberate differences that remain (needle's defaults where the course leaves room):

- ``Tensor(numpy_array)`` copies, as the course's does; ``Tensor(ndarray)`` of a needle NDArray
  shares its memory (the course copies that too): wrapping an NDArray is how to share on purpose.
- Under ``NEEDLE_BACKEND=np`` a Tensor's data is still needle's NDArray (not a bare numpy
  array), so every op and device works the same; it has numpy's ``flat``, ``shape``, ``dtype``,
  ``numpy()`` and arithmetic, and ``np.asarray`` reads it without a copy on the CPU.
- needle's NDArray keeps the dtype of the array it is given (the course's NDArray is float32 only).
- Every view made from a layout (``NDArray.make``, ``as_strided``, the device's ``compact`` and
  ``*_setitem``) is checked to lie within its handle (IndexError), and ``process_slice`` clamps a
  slice to its axis as numpy's indexing does; the course's would read or write past the buffer.

The test ``tests/test_course_imports.py`` imports every course module path and checks its names.
"""
