"""The backend at run time: threefry's CPU lowering, XLA:CPU options, whether backends started."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any

from jax._src.interpreters import mlir as _mlir

# JAX lowers the threefry2x32 hash on CPU as a rolled 5-step fori_loop (to keep compile times down);
# its carry holds two buffers of the output's size plus a copy, which XLA cannot fuse away, so an
# array of random numbers needs ~3x its own bytes of temporaries while it is generated. The
# unrolled lowering that JAX uses on GPU/TPU computes the same bits elementwise and fuses into the
# consumer: no temporaries. Module path: jax._src.prng on 0.7.2 .. 0.9, jax._src.random.threefry2x32
# from 0.10 (both keep `threefry2x32_p` and `_threefry2x32_lowering(..., use_rolled_loops)`).
try:
    from jax._src.random import threefry2x32 as _threefry  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - JAX 0.7.2 .. 0.9
    from jax._src import prng as _threefry  # type: ignore[no-redef,attr-defined]

_threefry_lock = threading.RLock()
_threefry_depth = 0
_threefry_saved: list[Any] = []


@functools.cache
def _unrolled_threefry_rule() -> Any:
    impl = getattr(_threefry, "_threefry2x32_lowering", None)
    prim = getattr(_threefry, "threefry2x32_p", None)
    if impl is None or prim is None:  # pragma: no cover - a JAX that moved them: keep the default
        return None, None
    rule = _mlir.lower_fun(functools.partial(impl, use_rolled_loops=False), multiple_results=True)
    return prim, rule


@contextlib.contextmanager
def unrolled_threefry_on_cpu() -> Any:
    """Lower threefry on CPU without the rolled loop while the block runs (same bits, no
    temporaries).

    Only what is lowered inside the block is affected. The rule is process-wide while the block
    runs, so a computation another thread lowers at that moment gets it too; that is harmless,
    since both lowerings compute identical bits. Nested and concurrent use is counted.
    """
    global _threefry_depth
    prim, rule = _unrolled_threefry_rule()
    if prim is None:  # pragma: no cover
        yield
        return
    table = _mlir._platform_specific_lowerings["cpu"]
    with _threefry_lock:
        if _threefry_depth == 0:
            _threefry_saved.append(table.get(prim))
            _mlir.register_lowering(prim, rule, platform="cpu")
        _threefry_depth += 1
    try:
        yield
    finally:
        with _threefry_lock:
            _threefry_depth -= 1
            if _threefry_depth == 0:
                saved = _threefry_saved.pop()
                if saved is None:
                    table.pop(prim, None)
                else:
                    table[prim] = saved


def xla_cpu_xnn_fusion_supported() -> bool:
    """Whether jaxlib's XLA:CPU runs XNNPACK greedy graph fusion on a training step.

    jaxlib 0.7.2 compiles the option but fails at run time ("XNNPACK operation failed: unsupported
    parameter"); 0.10.2 runs it. 0.8/0.9 are untested, so they are left off. Serves JAX < 0.10;
    delete when the floor reaches 0.10.
    """
    import jaxlib

    major, minor = (int(p) for p in jaxlib.__version__.split(".")[:2])
    return (major, minor) >= (0, 10)


def xla_cpu_remats_unrolled_layers() -> bool:
    """Whether XLA:CPU honours ``jax.checkpoint`` on layers of an unrolled loop.

    Measured on a train step of 6 unrolled GPT blocks (``model.remat=full``): jaxlib 0.12
    recomputes them (temporaries 1.32 GB without remat, 0.34 GB with), 0.10.2 keeps their
    activations anyway (1.31 GB either way) with either CPU scheduler; the same layers under
    ``lax.scan`` are recomputed on both. 0.7.2, 0.8.3 and 0.9.2 keep them too (6 small unrolled
    layers, as in the test); 0.11 is untested and taken to be like 0.12. Delete when the floor
    reaches 0.11.
    """
    import jaxlib

    major, minor = (int(p) for p in jaxlib.__version__.split(".")[:2])
    return (major, minor) >= (0, 11)


def backends_initialized() -> bool:
    """Whether JAX has started its backends (``jax.devices()`` or a first computation did).

    No public spelling on 0.7.2 .. 0.12 (``jax._src.xla_bridge.backends_are_initialized`` on each).
    """
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())
