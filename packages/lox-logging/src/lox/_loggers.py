"""Loggers: pure ``init``/``log``/``finish`` triples whose host work runs in callbacks.

A logger is configuration (a Python object, static under ``jit``); its ``LoggerState`` is a
pytree of arrays that names one *run* (a wandb run, a save folder, a console stream). The
state travels through ``log`` and into the host callback as an *argument*, never captured in
a closure: so ``jax.vmap`` over states gives one run per lane, and one compiled function
serves every run.
"""

from __future__ import annotations

import abc
import itertools
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from core_primitives import pytree_dataclass

from ._logdict import logdict
from ._save import save
from ._save_index import folder_path, refuse_link

State = Any


@pytree_dataclass
class LoggerState:
    """The state of one logger run: a pytree of arrays, safe to pass through jit and vmap.

    Attributes:
        run: int32 scalar naming the run on the host (batched under ``jax.vmap``: one run
            per lane).

    Example:
        >>> import jax.numpy as jnp, lox
        >>> lox.LoggerState(run=jnp.int32(0))
        LoggerState(run=Array(0, dtype=int32))
    """

    run: jax.Array


class Logger(abc.ABC):
    """Base class: a pair of pure functions ``init``/``log`` plus ``finish``, as in optax.

    ``state = logger.init(key=None)``; ``state = logger.log(state, logs)`` (safe under jit
    and vmap); ``logger.finish(state)``. A subclass needs only these three; ``spool`` and
    ``tap`` come from them. Override :meth:`write` too if ``log`` cannot run on the host
    inside a callback (``tap`` calls ``write`` there).

    Example:
        >>> import jax, jax.numpy as jnp, lox
        >>> class Count(lox.Logger):  # counts logged events in its state
        ...     def init(self, key=None):
        ...         return jnp.int32(0)
        ...     def log(self, state, logs):
        ...         return state + sum(len(jax.tree.leaves(v)[0]) for v in logs.values())
        ...     def finish(self, state):
        ...         pass
        >>> def f(x):
        ...     lox.log({'x': x})
        ...     return x + 1
        >>> logger = Count()
        >>> out, state = jax.jit(logger.spool(f, logger.init()))(1.0)
        >>> out.item(), state.item()
        (2.0, 1)
    """

    @abc.abstractmethod
    def init(self, key: jax.Array | None = None) -> State:
        """Start a run and return its state; ``jax.vmap(logger.init)(keys)`` starts one per key."""

    @abc.abstractmethod
    def log(self, state: State, logs: logdict) -> State:
        """Record ``logs`` in the run named by ``state``; return the new state."""

    @abc.abstractmethod
    def finish(self, state: State) -> None:
        """Close the run(s) named by ``state``."""

    def flush(self, state: State) -> None:
        """Make everything logged to ``state``'s run(s) so far durable now, on the host (e.g. at a
        checkpoint, so that a crash after it loses nothing the checkpoint covers). The default
        does nothing: a logger that writes at once has nothing held back."""
        del state

    def write(self, state: State, logs: logdict) -> None:
        """Host side of ``tap``: record ``logs`` for ``state`` (numpy values) right now.

        The default calls :meth:`log` on the host. Loggers whose ``log`` itself uses
        callbacks override this with their host code.
        """
        self.log(state, logs)

    def spool(
        self, f: Callable[..., Any], state: State, *, names: Any = None, tags: Any = None
    ) -> Callable[..., tuple[Any, State]]:
        """``g(*args, **kw) -> (f's output, new state)``: run ``lox.spool(f)``, then ``log``.

        ``names``/``tags`` select log sites as in ``lox.spool``.
        """
        from ._spool import spool  # lazy: the transformation half imports this module's users

        spooled = spool(f, names=names, tags=tags)

        def g(*args: Any, **kwargs: Any) -> tuple[Any, State]:
            out, logs = spooled(*args, **kwargs)
            return out, self.log(state, logs)

        return g

    def tap(
        self, f: Callable[..., Any], state: State, *, names: Any = None, tags: Any = None
    ) -> Callable[..., tuple[Any, State]]:
        """``g(*args, **kw) -> (f's output, state)``: each executed log site calls ``write``.

        Logs stream to the run as the function executes (inside jit, scan, vmap: one run per
        lane), as ``lox.tap`` does with a callback.
        """
        from ._tap import tap_with_state

        tapped = tap_with_state(f, self.write, state, names=names, tags=tags)

        def g(*args: Any, **kwargs: Any) -> tuple[Any, State]:
            return tapped(*args, **kwargs), state

        return g


# ---------------------------------------------------------------------------------------------
# Loggers whose runs live on the host, in a table keyed by the run id held in the state.


def _is_traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _key_data(key: Any) -> Any:
    if key is None:
        return None
    key = jnp.asarray(key)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def warn(message: str) -> None:
    """Warn without ever raising: inside a callback an exception would stop the computation.

    (Under ``-W error`` a warning *is* an exception; then it goes to the ``lox`` logger.)
    """
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:
        import logging

        logging.getLogger("lox").warning(message)


class HostLogger(Logger):
    """The base of your own logger when its runs live on the host (a file, a socket, a service).

    Fill in three hooks, each called on the host with NumPy values: ``open_run(run, key)``
    returns a handle for run number ``run`` (0, 1, ... per logger), ``write_run(handle, run,
    logs)`` records one run's ``logdict`` (no batch axis), ``close_run(handle, run)`` ends it.
    ``HostLogger`` makes them a pure ``init``/``log``/``finish`` logger: the state is a
    :class:`LoggerState` holding the run id, ``log`` works eagerly and under ``jit``, ``scan``
    and ``vmap`` (one run per lane) and keeps the order of the calls, and ``tap`` streams to
    ``write_run``. ``ConsoleLogger``, ``SaveLogger``, ``TensorBoardLogger`` and ``WandbLogger``
    are built this way.

    Hooks run inside JAX callbacks: an exception there stops the computation, so a logger that
    must never stop training catches its own errors (as ``WandbLogger`` does).

    Example:
        >>> import jax, jax.numpy as jnp, lox
        >>> class LossList(lox.HostLogger):  # each run's losses in a list, printed at the end
        ...     def open_run(self, run, key):
        ...         return []
        ...     def write_run(self, handle, run, logs):
        ...         handle.extend(logs['loss'].tolist())
        ...     def close_run(self, handle, run):
        ...         print(f'run {run}: {handle}')
        >>> logger = LossList()
        >>> @jax.jit
        ... def step(state, loss):
        ...     return logger.log(state, lox.logdict({'loss': loss[None]}))
        >>> state = logger.init()
        >>> state = step(state, jnp.float32(0.5))
        >>> state = step(state, jnp.float32(0.25))
        >>> logger.finish(state)
        run 0: [0.5, 0.25]
    """

    def __init__(self) -> None:
        self._runs: dict[int, Any] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    # -- hooks, run on the host ----------------------------------------------------------------

    def open_run(self, run: int, key: np.ndarray | None) -> Any:
        """Start run number ``run`` (0, 1, ... per logger); return its host handle."""
        return None

    @abc.abstractmethod
    def write_run(self, handle: Any, run: int, logs: logdict) -> None:
        """Record ``logs`` (numpy values, one run: no batch axis) in the run."""

    def close_run(self, handle: Any, run: int) -> None:
        """Finish the run."""

    def flush_run(self, handle: Any, run: int) -> None:
        """Write what the run holds back (see :meth:`Logger.flush`); by default nothing."""

    # -- the pure API --------------------------------------------------------------------------

    def init(self, key: jax.Array | None = None) -> LoggerState:
        """Start a run. Under ``jax.vmap`` over keys, one run per lane.

        Always a callback, even eagerly: decided at trace time, ``jax.jit(logger.init)``
        would bake one run id into the compiled function and reuse it on every call.
        """
        spec = jax.ShapeDtypeStruct((), jnp.int32)
        run = io_callback(self._host_init, spec, _key_data(key))
        return LoggerState(run=run)

    def log(self, state: LoggerState, logs: logdict) -> LoggerState:
        """Send ``logs`` to the run named by ``state``; returns the state (after the host wrote).

        The returned state depends on the callback, so successive logs through one state
        happen in order.
        """
        _check_log_args(type(self).__name__, state, logs)
        if not _is_traced((state, logs)):
            # Concrete values: write now, no compilation. np.asarray(state) waits for any
            # earlier (asynchronous) log that produced this state, which keeps the order.
            self._host_write(state, logs)
            return state
        # Logged values carry no gradient: without this, `jax.grad` through a function that
        # logs (e.g. of `logger.spool(f, state)`) fails, as io_callback has no JVP rule.
        logs = jax.lax.stop_gradient(logs)
        done = io_callback(self._host_log, jax.ShapeDtypeStruct((), jnp.int32), state, logs)
        # The new state waits for the callback (so logs through one state stay in order) but
        # is not its output: on a multi-device mesh a callback's output has a single-device
        # "maximal" sharding, which the next jit call would refuse as an input.
        state, _ = jax.lax.optimization_barrier((state, done))
        return state

    def finish(self, state: LoggerState) -> None:
        """Close the run(s) in ``state``; a batched state (from ``vmap(init)``) closes each."""
        if _is_traced(state):
            io_callback(self._host_finish, None, state)
            return
        jax.effects_barrier()  # let queued log callbacks reach the runs before closing them
        self._host_finish(state)

    def write(self, state: LoggerState, logs: logdict) -> None:
        self._host_write(state, logs)

    def flush(self, state: LoggerState) -> None:
        jax.effects_barrier()  # queued log callbacks first
        for run in np.ravel(np.asarray(state.run)).tolist():
            self.flush_run(self._handle(run), run)

    # -- host side -----------------------------------------------------------------------------

    def _host_init(self, key: Any) -> np.ndarray:
        with self._lock:
            run = next(self._ids)
        handle = self.open_run(run, None if key is None else np.asarray(key))
        with self._lock:
            self._runs[run] = handle
        return np.asarray(run, np.int32)

    def _host_log(self, state: LoggerState, logs: logdict) -> np.ndarray:
        self._host_write(state, logs)
        return np.zeros((), np.int32)

    def _host_write(self, state: LoggerState, logs: logdict) -> None:
        run = int(np.asarray(state.run))
        logs = jax.tree.map(np.asarray, logs)
        self.write_run(self._handle(run), run, logs)

    def _host_finish(self, state: LoggerState) -> None:
        for run in np.ravel(np.asarray(state.run)).tolist():
            with self._lock:
                handle = self._runs.pop(run, None)
            self.close_run(handle, run)

    def _handle(self, run: int) -> Any:
        with self._lock:
            if run in self._runs:
                return self._runs[run]
        raise ValueError(
            f"{type(self).__name__}.log: run {run} is not open in this logger (open runs: "
            f"{sorted(self._runs)}). Its state was finished already, or came from another "
            "logger instance: log with the state returned by this logger's init."
        )


def _check_log_args(name: str, state: Any, logs: Any) -> None:
    if not isinstance(logs, logdict):
        raise TypeError(
            f"{name}.log: expected a lox.logdict, got {type(logs).__name__}. Collect logs "
            "with lox.spool, or build one: lox.logdict({'loss': loss[None]})."
        )
    if not isinstance(state, LoggerState):
        raise TypeError(
            f"{name}.log: expected the LoggerState returned by {name}.init, got "
            f"{type(state).__name__}. Call state = logger.init() first."
        )
    if jnp.ndim(state.run) != 0:
        raise ValueError(
            f"{name}.log: the state holds {jnp.size(state.run)} runs (run ids of shape "
            f"{jnp.shape(state.run)}), e.g. from jax.vmap(logger.init). Log each run's "
            "logs under vmap too: jax.vmap(logger.log)(state, logs)."
        )


# ---------------------------------------------------------------------------------------------


class SaveLogger(HostLogger):
    """Append every run's logs to ``path/run_<i>`` with :func:`lox.save` (one folder per run).

    Runs are numbered per logger from 0 (under ``vmap``: lane order), so a resumed job that
    builds the same logger appends to the same folders. Read a run with
    ``lox.load(path / 'run_0')``. Nothing is written outside ``path``: a run folder, index or
    ``chunks`` folder that is a symbolic link raises ``lox.DamagedSaveError`` naming it.

    Args:
        path: the parent folder of the run folders.
        flush_every: save after this many ``log`` calls (and at ``finish``). Each save is one
            chunk file; logging every step of a long run, buffer (e.g. 100) to keep the
            folder small, at the price of losing up to that many calls in a crash.

    Example:
        >>> import tempfile, os, jax.numpy as jnp, lox
        >>> folder = tempfile.mkdtemp()
        >>> logger = lox.SaveLogger(folder)
        >>> state = logger.init()
        >>> state = logger.log(state, lox.logdict({'loss': jnp.array([0.5])}))
        >>> logger.finish(state)
        >>> lox.load(os.path.join(folder, 'run_0'))['loss'].tolist()
        [0.5]
    """

    def __init__(self, path: str | os.PathLike[str], *, flush_every: int = 1):
        if not isinstance(flush_every, int) or flush_every < 1:
            raise ValueError(
                f"SaveLogger: flush_every must be a positive int, got {flush_every!r}. Use 1 "
                "to save at every log call, or e.g. 100 to save every 100 calls."
            )
        self.path = folder_path("SaveLogger", path, "SaveLogger('runs/logs')")
        super().__init__()
        self.flush_every = flush_every

    def __repr__(self) -> str:
        return f"SaveLogger({self.path!r}, flush_every={self.flush_every})"

    def run_path(self, run: int) -> str:
        """The folder of run number ``run``."""
        return os.path.join(self.path, f"run_{int(run)}")

    def open_run(self, run: int, key: np.ndarray | None) -> list[logdict]:
        return []  # logs waiting to be saved

    def write_run(self, handle: list[logdict], run: int, logs: logdict) -> None:
        handle.append(logs)
        if len(handle) >= self.flush_every:
            self._flush(handle, run)

    def close_run(self, handle: list[logdict] | None, run: int) -> None:
        if handle:
            self._flush(handle, run)

    def flush_run(self, handle: list[logdict], run: int) -> None:
        if handle:
            self._flush(handle, run)

    def _flush(self, pending: list[logdict], run: int) -> None:
        logs = sum(pending[1:], pending[0])
        pending.clear()
        # The run folder is lox's own: a link there would send the logs out of `path`.
        refuse_link("SaveLogger", self.path, os.path.basename(self.run_path(run)))
        save(logs, self.run_path(run))


class MultiLogger(Logger):
    """Send every log to several loggers; its state is the tuple of their states.

    Example:
        >>> import tempfile, jax.numpy as jnp, lox
        >>> logger = lox.MultiLogger(lox.ConsoleLogger(), lox.SaveLogger(tempfile.mkdtemp()))
        >>> state = logger.init()
        >>> state = logger.log(state, lox.logdict({'loss': jnp.array([0.5])}))
        loss=0.5
        >>> logger.finish(state)
    """

    def __init__(self, *loggers: Logger):
        for i, lg in enumerate(loggers):
            if not isinstance(lg, Logger):
                raise TypeError(
                    f"MultiLogger: argument {i} is {type(lg).__name__}, expected a lox.Logger "
                    "(ConsoleLogger(), SaveLogger(path), WandbLogger(...), or a subclass)."
                )
        self.loggers: tuple[Logger, ...] = loggers

    def __repr__(self) -> str:
        return f"MultiLogger({', '.join(repr(lg) for lg in self.loggers)})"

    def init(self, key: jax.Array | None = None) -> tuple[State, ...]:
        return tuple(lg.init(key) for lg in self.loggers)

    def log(self, state: Sequence[State], logs: logdict) -> tuple[State, ...]:
        self._check(state)
        return tuple(lg.log(s, logs) for lg, s in zip(self.loggers, state))

    def finish(self, state: Sequence[State]) -> None:
        self._check(state)
        for lg, s in zip(self.loggers, state):
            lg.finish(s)

    def flush(self, state: Sequence[State]) -> None:
        self._check(state)
        for lg, s in zip(self.loggers, state):
            lg.flush(s)

    def write(self, state: Sequence[State], logs: logdict) -> None:
        for lg, s in zip(self.loggers, state):
            lg.write(s, logs)

    def _check(self, state: Any) -> None:
        if not isinstance(state, tuple | list) or len(state) != len(self.loggers):
            got = f"{len(state)} states" if isinstance(state, tuple | list) else type(state)
            raise TypeError(
                f"MultiLogger: expected a tuple of {len(self.loggers)} states (one per logger, "
                f"from MultiLogger.init), got {got}."
            )
