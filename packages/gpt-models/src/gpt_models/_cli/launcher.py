"""What the ``gpt`` program does before its command runs: restart once on CPU for a steady peak
memory, and stop on the first Ctrl-C.

**The restart.** ``gpt train`` on JAX's CPU backend restarts itself once, before JAX starts, with
glibc's start-up tunables (``START_TUNABLES``: one malloc arena, no per-thread cache of freed
blocks; ``_compute/host_memory.py`` says why), so that its peak memory is the same in every run.
Whether to restart is a pure function of the environment and the platform
(:func:`restart_environment`). ``GPT_CPU_RESTART=0`` turns it off; a user's own glibc malloc
settings (``GLIBC_TUNABLES``, ``MALLOC_*``) are left as they are, with no restart. The restarted
process takes the tunables out of its environment again (:func:`settle_after_restart`): glibc read
them at start, and the programs it starts (a data loader, lm-eval, git) get the user's environment,
not ours. A restart that fails says so in one line and the command goes on unrestarted.

**Ctrl-C.** Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread is, and when
that is inside a garbage-collection callback (JAX registers one) or a finaliser, Python prints
"Exception ignored" and drops it: the command went on as if no key had been pressed. The handler
installed here (:func:`stop_on_first_interrupt`) raises it again once out of such a callback (or
out of an import, which numpy would turn into an ``ImportError`` with a traceback), so
the first Ctrl-C stops every command within moments; ``console`` then exits with status 130 and
one line. While the command's own code is imported (JAX, orbax: 5 to 15 s on a loaded machine)
nothing has started, so a Ctrl-C there ends the program at once (:func:`loading_the_command`)
instead of waiting for the import. Training installs its own handler while its steps run (save,
then stop).
"""

from __future__ import annotations

import gc
import os
import platform
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

from .._errors import UsageError

# The named off switch: GPT_CPU_RESTART=0 (1 or unset: restart where it helps).
OFF_SWITCH = "GPT_CPU_RESTART"
# Set only in the restarted process's environment, which takes it out again at once.
_RESTARTED = "GPT_RESTARTED_WITH_TUNABLES"
# How long after a Ctrl-C that landed in a garbage-collection callback it is raised again.
_REDELIVER_S = 0.05


def restart_environment(
    environ: Mapping[str, str], *, command: str, platform_: tuple[str, str], cpu_only: bool
) -> dict[str, str] | None:
    """The environment ``gpt`` restarts with, or None where it does not restart.

    Args:
        environ: the process's environment.
        command: the ``gpt`` command (only ``train`` restarts).
        platform_: the system and its C library, e.g. ``("Linux", "glibc")``.
        cpu_only: whether JAX can start only its CPU backend (and has not started yet).

    Raises:
        UsageError: ``GPT_CPU_RESTART`` is set to something other than ``0`` or ``1``.

    Example:
        >>> env = restart_environment({}, command="train", platform_=("Linux", "glibc"),
        ...                           cpu_only=True)
        >>> env["GLIBC_TUNABLES"]
        'glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0'
        >>> restart_environment({"GPT_CPU_RESTART": "0"}, command="train",
        ...                     platform_=("Linux", "glibc"), cpu_only=True) is None
        True
    """
    from .._compute.host_memory import START_TUNABLES, USER_TUNABLES

    switch = environ.get(OFF_SWITCH, "1").strip()
    if switch not in ("0", "1"):
        raise UsageError(
            f"{OFF_SWITCH}={environ[OFF_SWITCH]!r}: expected 0 (gpt train does not restart "
            "itself with glibc's start-up tunables) or 1 (it does, on CPU; the default). Set one "
            f"of them, or unset {OFF_SWITCH}."
        )
    if (
        switch == "0"
        or command != "train"
        or _RESTARTED in environ
        or platform_ != ("Linux", "glibc")
        or not cpu_only
        or any(name in environ for name in USER_TUNABLES)  # the user's settings win
    ):
        return None
    return {**environ, "GLIBC_TUNABLES": START_TUNABLES, _RESTARTED: "1"}


def restart_if_useful(command: str) -> None:
    """Restart ``gpt`` with :func:`restart_environment`'s environment (never returns), or return
    where it does not apply; a restart that fails is one line on stderr."""
    system = (platform.system(), platform.libc_ver()[0])
    env = restart_environment(os.environ, command=command, platform_=system, cpu_only=_cpu_only())
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # A Ctrl-C during the restart stays pending (the mask survives exec) until the new process has
    # its handler (stop_on_first_interrupt), instead of landing in its interpreter's start-up.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    if _interrupted["deferred"]:  # one held back (in an import) would die with this process
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _interrupted["raised"] = True
        raise KeyboardInterrupt
    # argv[0] is this interpreter's own path: Python finds its environment (a venv) from it.
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as err:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        print(
            f"gpt: note: could not restart with glibc's start-up tunables ({err}); training "
            f"goes on without them, and its peak memory may differ between runs. "
            f"{OFF_SWITCH}=0 skips the restart.",
            file=sys.stderr,
        )


def _cpu_only() -> bool:
    """Whether JAX can start only its CPU backend, and has not started it yet (asked without
    importing JAX: the restarted process imports it once)."""
    from .._compute.host_memory import backends_started, cpu_backend_only

    return not backends_started() and cpu_backend_only()


def settle_after_restart(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """In a restarted ``gpt``: take the start-up tunables out of ``environ`` (glibc has read them),
    so that programs it starts do not inherit them. Whether this process was restarted."""
    if environ.pop(_RESTARTED, None) is None:
        return False
    environ.pop("GLIBC_TUNABLES", None)  # a restart only happens where the user set none
    return True


def stop_on_first_interrupt() -> None:
    """Make the first Ctrl-C raise ``KeyboardInterrupt`` in the main thread's own code, even when
    it arrives inside a garbage-collection callback or a finaliser (see the module docstring)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # started ignoring it: it stays so
        signal.signal(signal.SIGINT, _interrupt)
    # A Ctrl-C held back through the restart (restart_if_useful) is delivered now, to the handler.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def was_interrupted() -> bool:
    """Whether the handler raised ``KeyboardInterrupt`` in this process: whatever error that
    became on its way up (an import that it cut short fails with an ``ImportError``), the
    command was stopped by Ctrl-C."""
    return _interrupted["raised"]


_interrupted = {"raised": False, "deferred": False, "nothing_started": False}


@contextmanager
def loading_the_command() -> Iterator[None]:
    """While this block runs, nothing of the command has started: a Ctrl-C that lands in an
    import inside it ends the program at once (exit 130, one line), where elsewhere it would wait
    for the import to finish."""
    _interrupted["nothing_started"] = True
    try:
        yield
    finally:
        _interrupted["nothing_started"] = False


def _say_interrupted() -> None:
    print("\ngpt: interrupted (Ctrl-C); stopped before finishing.", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _in_swallowing_callback(frame):
        if _interrupted["nothing_started"]:  # inside the command's import: nothing to undo
            _interrupted["raised"] = True
            _say_interrupted()
            os._exit(130)
        _interrupted["deferred"] = True  # raised again soon (a thread sends it once more)
        threading.Timer(_REDELIVER_S, os.kill, (os.getpid(), signum)).start()
        return
    _interrupted["raised"] = True
    raise KeyboardInterrupt


def _in_swallowing_callback(frame: FrameType | None) -> bool:
    """Whether an exception raised at ``frame`` would be dropped or mangled: it runs inside a
    garbage-collection callback or a ``__del__`` (Python drops it), or inside an import (numpy,
    for one, turns it into an ``ImportError`` after printing its traceback, and leaves the module
    half-imported); raised again once out of it."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__" or code.co_filename.startswith(_IMPORT):
            return True
        frame = frame.f_back
    return False


_IMPORT = "<frozen importlib"


def console() -> int:
    """The ``gpt`` program (its console script and ``python -m gpt_models``): the Ctrl-C handler
    first (before the parser's imports, and long before JAX's), the command line parsed once,
    the CPU restart where it helps (``GPT_CPU_RESTART=0`` to skip), then the command."""
    try:
        stop_on_first_interrupt()
        from .main import parse, run

        args = parse(None)  # --help and usage errors exit here, as in main
        if not settle_after_restart():
            restart_if_useful(args.command)
        return run(args, loading=loading_the_command)
    except UsageError as err:  # the launcher's own (a bad GPT_CPU_RESTART)
        print(f"gpt: error: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Exception):
        if not was_interrupted():
            raise
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping: a re-sent one has nothing to stop
        _say_interrupted()
        # Every `finally` has run on the way here. The interpreter's own teardown is skipped: with
        # XLA still compiling on its threads it crashed (SIGSEGV) instead of exiting 130.
        os._exit(130)
