"""A stand-in for CuPy that runs ElementwiseKernels on the host, for machines without a GPU.

``host_cupy()`` returns a module that is numpy everywhere except ``ElementwiseKernel``: that
one turns the kernel's operation into a C++ loop over the elements, compiles it with the
system's ``g++`` and runs it on numpy arrays, binding arguments the way CuPy does (inputs,
then outputs; a non-raw parameter given a scalar is passed by value; ``raw`` parameters are
whole arrays indexed by position; ``size=`` sets the loop's length when every array is raw;
``i`` is the element index; each type placeholder is a
``typedef`` of the dtype it binds to). ``CupyKernels(host_cupy())`` then runs needle's kernel
code, and the glue that calls it, with numpy arrays.

It checks what a kernel computes, not how CuPy launches it: our kernels are one independent
thread per element or row, so a sequential loop gives what the GPU gives.
"""
import atexit
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import types

import numpy as np

C_TYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int64): "long long",
    np.dtype(np.int32): "int",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.bool_): "bool",
}


def compiler_available():
    return shutil.which("g++") is not None


class Param:
    """One parameter of a kernel signature such as ``"raw T logits"`` or ``"int32 classes"``."""

    def __init__(self, text, is_output):
        words = text.split()
        self.raw = words[0] == "raw"
        self.type_name, self.name = words[-2], words[-1]
        self.is_output = is_output
        self.placeholder = len(self.type_name) == 1  # "T", "I": bound by the arguments

    def dtype(self, bindings):
        return bindings[self.type_name] if self.placeholder else np.dtype(self.type_name)


def parse(signature, is_output):
    return [Param(part.strip(), is_output) for part in signature.split(",") if part.strip()]


class HostElementwiseKernel:
    """An ElementwiseKernel compiled as a C++ loop on the host."""

    _cache = {}

    def __init__(self, in_params, out_params, operation, name, **_):
        self.params = parse(in_params, False) + parse(out_params, True)
        self.operation = operation
        self.name = name

    def __call__(self, *args, size=None):
        params = self.params
        inputs = [p for p in params if not p.is_output]
        if len(args) not in (len(inputs), len(params)):
            raise TypeError(f"{self.name}: takes {len(inputs)} or {len(params)} arguments, got {len(args)}")
        bindings = self._bind(args)
        arrays = [a for p, a in zip(params, args) if not p.raw and isinstance(a, np.ndarray) and a.ndim > 0]
        if size is not None:
            if arrays:
                raise ValueError(f"{self.name}: size= is for kernels whose arrays are all raw")
            shape = (size,)
        elif arrays:
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
        else:
            raise ValueError(f"{self.name}: every array is raw, so the call needs size=")
        args = list(args)
        for p in params[len(args):]:  # outputs CuPy would allocate
            args.append(np.empty(shape, dtype=p.dtype(bindings)))
        scalar_mask = tuple(not p.raw and not (isinstance(a, np.ndarray) and a.ndim > 0) for p, a in zip(params, args))
        buffers = []
        for p, a, is_scalar in zip(params, args, scalar_mask):
            dtype = p.dtype(bindings)
            if is_scalar:
                buffers.append(np.array([a], dtype=dtype))
                continue
            if a.dtype != dtype:
                raise TypeError(f"{self.name}: {p.name} is {a.dtype}, the kernel binds {p.type_name} to {dtype}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{self.name}: {p.name} must be C-contiguous here (CuPy would index any layout)")
            if not p.raw and a.shape != shape:
                raise ValueError(f"{self.name}: {p.name} has shape {a.shape}, the loop runs over {shape}")
            buffers.append(a)
        function = self._compiled(bindings, scalar_mask)
        pointers = (ctypes.c_void_p * len(buffers))(*(b.ctypes.data for b in buffers))
        function(ctypes.c_longlong(int(np.prod(shape))), pointers)
        outputs = args[len(inputs):]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _bind(self, args):
        bindings = {}
        for p, a in zip(self.params, args):
            if p.placeholder and p.type_name not in bindings and isinstance(a, np.ndarray):
                bindings[p.type_name] = a.dtype
        for p, a in zip(self.params, args):  # a placeholder only scalars use: their numpy type
            if p.placeholder and p.type_name not in bindings:
                bindings[p.type_name] = np.asarray(a).dtype
        return bindings

    def _compiled(self, bindings, scalar_mask):
        source = self._source(bindings, scalar_mask)
        key = hashlib.sha256(source.encode()).hexdigest()[:16]
        function = self._cache.get(key)
        if function is None:
            function = self._cache[key] = _compile(source, key)
        return function

    def _source(self, bindings, scalar_mask):
        lines = ["#include <cmath>", "#include <math.h>", "using std::exp; using std::log; using std::sqrt;"]
        lines += [f"typedef {C_TYPES[np.dtype(d)]} {name};" for name, d in sorted(bindings.items())]
        lines.append('extern "C" void kernel(long long n, void** args) {')
        body = []
        for k, (p, is_scalar) in enumerate(zip(self.params, scalar_mask)):
            c_type = p.type_name if p.placeholder else C_TYPES[np.dtype(p.type_name)]
            if p.raw:
                lines.append(f"  {c_type}* {p.name} = ({c_type}*)args[{k}];")
            elif is_scalar:
                lines.append(f"  const {c_type} {p.name} = *(const {c_type}*)args[{k}];")
            elif p.is_output:
                body.append(f"    {c_type}& {p.name} = (({c_type}*)args[{k}])[i];")
            else:
                body.append(f"    const {c_type}& {p.name} = ((const {c_type}*)args[{k}])[i];")
        lines.append("  for (long long i = 0; i < n; ++i) {")
        lines += body
        lines += ["    {", self.operation + ";", "    }", "  }", "}"]  # CuPy adds the ";" too
        return "\n".join(lines)


_build_directory = []  # made on first use, removed when the process exits


def _compile(source, key):
    if not _build_directory:
        _build_directory.append(tempfile.mkdtemp(prefix="needle_host_kernels_"))
        atexit.register(shutil.rmtree, _build_directory[0], ignore_errors=True)
    path = os.path.join(_build_directory[0], key)
    with open(path + ".cpp", "w") as file:
        file.write(source)
    result = subprocess.run(
        ["g++", "-O1", "-shared", "-fPIC", "-o", path + ".so", path + ".cpp"], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"g++ rejected the kernel:\n{result.stderr}\n{source}")
    function = ctypes.CDLL(path + ".so").kernel
    function.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_void_p)]
    function.restype = None
    return function


def host_cupy():
    """numpy, with ``ElementwiseKernel`` replaced by the host-compiled stand-in."""
    module = types.ModuleType("host_cupy")
    module.__dict__.update({name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    module.ElementwiseKernel = HostElementwiseKernel
    module.__name__ = "host_cupy"
    return module
