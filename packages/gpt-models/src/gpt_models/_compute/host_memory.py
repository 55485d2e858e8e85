"""Host memory for XLA:CPU steps: reuse each step's scratch space instead of faulting it in anew.

XLA:CPU gives every execution one temporary buffer holding all its intermediate values (325 MB for
a train step of the tiny peer shape: batch 32, context 128, d_model 128, 4 layers; 1.46 GB for the
~10M one) and frees it when the execution ends. The allocation happens on one of XLA's worker
threads, and glibc serves a block that large from the thread's own arena with a fresh ``mmap`` that
the ``free`` unmaps again. So each step starts on untouched pages: 84,000 page faults and ~0.16 s of
kernel time per tiny step on 2 cores, a sixth of the step (``benchmarks/gpt/PROFILE.md``).

Two ``mallopt`` calls fix it. Before JAX starts, one arena for every thread, so XLA's workers
allocate from the main heap (alone this changes nothing). Once the steps are compiled, no ``mmap``
and no trimming of the heap: the freed scratch block stays in the process and the next step reuses
it. Switching only after compiling keeps the compiler's own peak memory out of the kept heap
(measured in a benchmark loop: peak RSS of the ~10M step 2.1 GB either way; 4.9-6.4 GB when both
are set at start). XLA frees the scratch just after a step's outputs are ready, so each kept step
runs inside :class:`await_scratch`, which holds the next step back until the block is free again;
otherwise the heap grew by whole buffers. On its first kept step :class:`await_scratch` also leaves
a free block of half a scratch in the heap (the plug): glibc serves a request from the smallest
free block that fits it, so the small allocations made between steps land in the plug instead of
splitting the free scratch block, which the next step then reuses whole. Without the plug about 4
runs in 10 kept a second scratch block from the first steps on (tiny preset: 1.00 GiB of RSS
instead of 0.70). The other cause of that second block is glibc's per-thread cache of small freed
blocks (tcache): XLA asks for its scratch over-aligned, glibc gives back the few bytes it cut off
either side, and while a worker thread's cache holds them as if in use, the freed scratch cannot
merge with the free memory around it, and the next step's aligned request no longer fits it. The
cache can only be turned off when the process starts (``GLIBC_TUNABLES``), so ``gpt train`` on CPU
restarts itself once, before JAX starts, with :data:`START_TUNABLES` (``_cli/launcher.py``).
With both, the default ``gpt train`` (tiny preset) peaks at 0.66 GiB of RSS in every run
(``benchmarks/gpt/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
import weakref
from typing import Any, ClassVar

# mallopt(3) parameters (glibc's malloc.h); M_TRIM_THRESHOLD = -1 means "never trim".
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
# glibc's defaults, restored by keep_host_memory(False).
_DEFAULT_MMAP_MAX, _DEFAULT_TRIM = 65536, 128 * 1024
# The environment variables through which a user tunes glibc's malloc: any of them and we leave
# the allocator as the user set it.
USER_TUNABLES = (
    "GLIBC_TUNABLES",
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
)
# glibc's settings that only a process's start can make (see the module's docstring): one malloc
# arena for every thread, and no per-thread cache of freed blocks. What `gpt train` restarts with.
START_TUNABLES = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0"
# glibc places each free block's links in its first bytes: a plug is "right below" its guard
# when the guard starts within this many bytes of the plug's end (one chunk header, aligned).
_CHUNK_OVERHEAD = 64
_state = {"tuned": False, "kept": False}
_plug = {"size": 0}  # the largest plug asked for in this process (see await_scratch)


def tune_host_allocator() -> bool:
    """Prepare glibc's malloc to keep XLA:CPU's per-step scratch memory (step 1 of 2).

    XLA:CPU frees each step's scratch buffer (all its intermediate values) when the step ends, and
    glibc returns a block that large to the system, so the next step page-faults it back in. Call
    this first, before JAX starts (any ``jax.devices()`` or computation): it puts every thread on
    one malloc arena. A thread that allocated before this call keeps an arena of its own, which
    glibc later hands on to some of XLA's threads (a script starting such a thread first: 3 of 7
    runs peaked at 1.37 GB instead of 0.79 GB); if your script starts threads before it, run it with
    ``MALLOC_ARENA_MAX=1`` in the environment instead, the same setting from the process's start
    (this then returns ``True`` and changes nothing), or better with
    ``GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0``, what ``gpt train``
    restarts itself with: one arena from the start and no per-thread cache of freed blocks, whose
    keeping of a few bytes either side of a freed scratch buffer otherwise made about 4 runs in 10
    keep a second one (see the module's docstring). Then call :func:`keep_host_memory` once the
    steps are compiled. Measured on 2 cores: 1.4x tokens/s on the tiny peer shape, 1.24x on the ~10M
    one, with no page faults per step (``benchmarks/gpt/PROFILE.md``). The process keeps one scratch
    buffer in its heap between steps (wrap each step in :class:`await_scratch`); to leave the
    allocator as glibc sets it, do not call it (for ``gpt train``: ``GPT_CPU_RESTART=0`` skips the
    restart; any glibc malloc setting of yours, e.g. ``MALLOC_ARENA_MAX=8``, is left as it is).

    ``gpt train`` does both itself when JAX can only start its CPU backend, after restarting with
    those tunables (``gpt eval`` and ``gpt sample`` the first, without restarting).

    Returns:
        ``True`` when applied (or set already by ``MALLOC_ARENA_MAX=1`` or the tunables above);
        ``False``, changing nothing, where the C library is not glibc or the environment already
        tunes glibc's malloc otherwise (``GLIBC_TUNABLES``, ``MALLOC_ARENA_MAX=4``, ...): your
        settings win.

    Raises:
        RuntimeError: JAX has already started its backends.

    Example:
        >>> import gpt_models  # first thing in a training script
        >>> gpt_models.tune_host_allocator()  # doctest: +SKIP
        True
        >>> # ... build and compile the train step, run the first step, then:
        >>> gpt_models.keep_host_memory()  # doctest: +SKIP
        True
    """
    if backends_started():
        raise RuntimeError(
            "tune_host_allocator() was called after JAX started its backends: XLA's worker "
            "threads already have their own malloc arenas, so it would change nothing. Call it "
            "first, before jax.devices() or any JAX computation (gpt train does it itself on CPU)."
        )
    return _set_one_arena()


def keep_host_memory(keep: bool = True) -> bool:
    """Keep freed memory in the process from now on (step 2 of 2, after
    :func:`tune_host_allocator`).

    Call once the train step is compiled (after its first call): the compiler's garbage is first
    handed back to the system (``malloc_trim``), then glibc serves large blocks from the heap and
    never trims it, so each step's scratch buffer is the previous step's.
    ``keep_host_memory(False)``
    undoes it (glibc's defaults again) and hands the free memory back (``malloc_trim``, also when
    nothing was kept), so what runs outside the train steps (evaluations, sampling) does not add
    its own scratch to a heap that is never given back; ``gpt train`` calls it before the first
    step, around each evaluation and after the last step. Wrap each kept step in
    :class:`await_scratch`. Returns whether freed memory is kept now (``keep`` when applied);
    ``False``, changing nothing, when :func:`tune_host_allocator` did not apply in this process.
    """
    if not _state["tuned"] or (keep and _state["kept"]):
        return _state["kept"]
    libc = ctypes.CDLL(None)
    if keep:
        libc.malloc_trim(0)  # before keeping: the compile's freed memory goes back now, not never
        _state["kept"] = all(
            libc.mallopt(param, value) == 1
            for param, value in ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, -1))
        )
    else:
        if _state["kept"]:
            for param, value in (
                (_M_MMAP_MAX, _DEFAULT_MMAP_MAX),
                (_M_TRIM_THRESHOLD, _DEFAULT_TRIM),
            ):
                libc.mallopt(param, value)
        libc.malloc_trim(0)
        _state["kept"] = False
    return _state["kept"]


class _MallInfo2(ctypes.Structure):
    _fields_: ClassVar = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2``, looked up once (a lookup per call cost the loop more than the call);
    ``None`` before glibc 2.33."""
    mallinfo2 = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
    return mallinfo2


def heap_in_use() -> int | None:
    """Bytes of the kept heap in use (glibc's ``mallinfo2().uordblks``); ``None`` while memory is
    not kept or where glibc is older than 2.33 (no ``mallinfo2``)."""
    if not _state["kept"] or (mallinfo2 := _mallinfo2()) is None:
        return None
    return int(mallinfo2().uordblks)


class await_scratch:
    """Around one train step: on leaving, wait until the step's scratch buffer is back in the heap.

    XLA:CPU frees an execution's scratch buffer on its worker thread just *after* the step's
    outputs become ready. A next step dispatched in that gap asks for its own scratch while the
    previous one is still taken, and the kept heap (:func:`keep_host_memory`) grows by a whole
    new buffer that then stays resident: ``gpt train`` on the ~10M peer shape settled at 1.97 GB,
    or 3.4 or 4.9 GB, depending on when that happened. Wrap each step, from its dispatch to
    reading its outputs, and the next one starts only once the buffer is free again. Leaving polls
    glibc's in-use heap bytes (``mallinfo2``) until they are within half a scratch buffer of what
    they were on entering, for at most ``timeout`` seconds. ``returned`` says whether the buffer
    was seen coming back.

    The free buffer must also stay whole until the next step asks for it: glibc serves any
    request that no smaller free block fits from the free scratch buffer, and a buffer split that
    way no longer holds the next scratch, so the heap grows by a whole new one (``gpt train``,
    tiny preset: 1.00 GiB of RSS instead of 0.70 in about 4 runs of 10). So the first kept entry
    for a compiled step leaves a free block of half its scratch size in the heap, kept apart from
    the free top of the heap by a small block above it: every request between two steps smaller
    than that finds a smaller free block than the scratch buffer's and goes there. It costs
    address space, not memory (its pages are touched only as allocations use them).

    Entering and leaving do nothing while memory is not kept, where XLA gives no memory analysis,
    or on a glibc older than 2.33.

    Example:
        >>> import gpt_models, jax, jax.numpy as jnp
        >>> step = jax.jit(lambda x: jnp.tanh(x @ x).sum()).lower(jnp.ones((64, 64))).compile()
        >>> with gpt_models.await_scratch(step) as waited:
        ...     loss = float(step(jnp.ones((64, 64))))  # dispatch, then read the outputs
        >>> waited.returned
        True
    """

    def __init__(self, compiled_step: object, timeout: float = 0.25) -> None:
        self.scratch, self.timeout = scratch_bytes(compiled_step), timeout
        self.before: int | None = None
        self.returned = True

    def __enter__(self) -> await_scratch:
        self.before = heap_in_use() if self.scratch > 0 else None
        if self.before is not None and _plug["size"] < self.scratch // 2:
            _plug["size"] = self.scratch // 2  # one try per size: a failed one is not retried
            _plant_plug(self.scratch // 2)
            self.before = heap_in_use()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.before is None or exc[0] is not None:
            return
        limit, deadline = self.before + self.scratch // 2, time.perf_counter() + self.timeout
        while (now := heap_in_use()) is not None and now > limit:
            if time.perf_counter() > deadline:
                self.returned = False
                return
            time.sleep(0.0002)


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def _plant_plug(size: int) -> bool:
    """Leave a free block of ``size`` bytes in the kept heap that is not part of its free top.

    Asks for two blocks of ``size``, the plug and then a guard: glibc carves each from the
    smallest free block that holds it, so the guard comes from what the plug's source left (the
    top of the heap, or the rest of a larger free block), right above the plug. The guard then
    shrinks in place to a few bytes (its tail goes back to where it came from) and the plug is
    freed: a free block that the guard keeps from merging into the free top, which glibc uses only
    when no free block fits. Returns whether the guard was found right above the plug; when not,
    both are freed again and the heap is as it was (the plug's source, a free block at least as
    large, plays the plug's part while it is smaller than a scratch buffer).
    """
    libc = _libc()
    plug = libc.malloc(size)
    guard = libc.malloc(size) if plug else None
    adjacent = bool(plug and guard and 0 <= guard - plug - size <= _CHUNK_OVERHEAD)
    if adjacent:
        guard = libc.realloc(guard, 1)  # never freed: 32 bytes, for as long as the process runs
    else:
        libc.free(guard)
    libc.free(plug)
    return adjacent


def scratch_bytes(compiled: object) -> int:
    """The scratch (temporary) bytes of one call of a compiled step; 0 where XLA does not say.

    Asked of XLA once per compiled step (its memory analysis took the main thread 8 to 9 ms a
    call, each tiny step, CPU that the step's own threads lacked on a 2-core machine)."""
    try:
        return _scratch_cache[compiled]
    except (KeyError, TypeError):  # TypeError: not weakly referable, never cached
        pass
    try:
        got = int(compiled.memory_analysis().temp_size_in_bytes)  # type: ignore[attr-defined]
    except Exception:  # not compiled ahead of time, or a backend without the analysis
        got = 0
    with contextlib.suppress(TypeError):
        _scratch_cache[compiled] = got
    return got


_scratch_cache: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def tune_host_allocator_for_cli() -> bool:
    """``tune_host_allocator`` where it helps and is in time: JAX can only start its CPU backend
    and has not started yet (``gpt_models.main`` called after JAX started skips it)."""
    if backends_started() or not cpu_backend_only():
        return False
    return _set_one_arena()


def backends_started() -> bool:
    """Whether JAX has started its backends, without importing JAX where nothing has yet.

    ``gpt train``'s CPU restart asks before JAX is imported: importing it only to learn that it
    has not started cost seconds (6.6 s on a loaded 2-core machine) that the restarted process
    then spent again, and a Ctrl-C in that import waited for its end.
    """
    if "jax" not in sys.modules:  # not imported: nothing can have started its backends
        return False
    from core_primitives import compat

    return compat.backends_initialized()


def cpu_backend_only() -> bool:
    """Whether JAX will start only its CPU backend: ``JAX_PLATFORMS`` names ``cpu`` first, or it is
    unset and no accelerator plugin (CUDA, ROCm, TPU) is installed."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        return platforms.split(",")[0].strip().lower() == "cpu"
    if importlib.metadata.entry_points(group="jax_plugins"):
        return False
    if importlib.util.find_spec("libtpu") is not None:
        return False
    try:
        import jax_plugins  # the namespace package accelerator plugins install into
    except ImportError:
        return True
    return not list(getattr(jax_plugins, "__path__", []))


def _set_one_arena() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    tunables = [name for name in USER_TUNABLES if name in os.environ]
    if tunables == ["GLIBC_TUNABLES"] and os.environ["GLIBC_TUNABLES"] == START_TUNABLES:
        _state["tuned"] = True  # restarted with our start-up tunables: one arena already
        return True
    if tunables == ["MALLOC_ARENA_MAX"] and os.environ["MALLOC_ARENA_MAX"].strip() == "1":
        _state["tuned"] = True  # one arena from the process's start: what we set, only earlier
        return True
    if tunables:
        return False
    _state["tuned"] = _state["tuned"] or ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1) == 1
    return _state["tuned"]
