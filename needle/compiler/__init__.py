"""``ndl.compile``: capture a training step once, replay it as a static plan.

One concept per module: :mod:`.traced_array` (the numpy array that reports its operations),
:mod:`.recorder` (the steps of one capture), :mod:`.plan` (the replay), :mod:`.state` (the
models and optimizers a step reaches), :mod:`.sources` (the globals and closure variables it reads),
:mod:`.arguments` (its inputs among the arguments), :mod:`.assignment_watch` (the optimizer
hyper-parameters it sets), :mod:`.capture` (one capture and what it expects),
:mod:`.compiled` (the wrapper), :mod:`.cuda_graph` (a CUDA replay as graph launches),
:mod:`.eager_entry` (a signature that runs eagerly after a fallback).
"""
from .compiled import CompiledFunction, compile
from .errors import CaptureError, EagerFallbackWarning, RecaptureWarning

__all__ = ["CaptureError", "CompiledFunction", "EagerFallbackWarning", "RecaptureWarning", "compile"]
