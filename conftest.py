"""The test environment every test folder shares, set up once here.

Environment, set before anything imports JAX (pytest loads this file before any test module or
package conftest): 8 fake CPU devices (`XLA_FLAGS`), the CPU platform (`JAX_PLATFORMS`) and
wandb off the network (`WANDB_MODE=disabled`). Each is a default: a value the caller set wins,
so `XLA_FLAGS=--xla_force_host_platform_device_count=2 pytest ...` runs on 2 devices and the
accelerator sessions (`JAX_PLATFORMS=""`) reach their GPU or TPU.

Meshes shaped by the devices present, and `min_devices`: on CPU the 8 fake devices make the
default a (2, 4) data x model grid; on a real machine (1 or 8 GPUs, a TPU v4-8's 4 chips) the
same tests build the grid the devices allow. Tests that cannot mean anything on fewer devices
carry `@pytest.mark.min_devices(n)` and are skipped with the reason.

Every way the tests run loads this file: `pytest` from the repository root (every nox session
runs there, `floors` and `integration` included, and the docs session's doctests), and the
`wheels` session copies it next to the copied tests folders (`--confcutdir`), so installed
wheels are tested the same way. JAX is imported lazily, inside the hooks, for the same reason.

JAX's next primitives: `JAX_NEXT_FLAGS=jax_scan3` (comma-separated JAX flags) turns those flags on
for the run (`nox -s next_primitives`); the `next_flag` fixture turns each on for one test.

Subprocesses are waited on while they make progress, not on a clock (the ``patience`` fixture): a
fixed timeout that a quiet machine meets by far expired under a load of 9 on 2 cores, and failed a
test for the machine's sake. A group of processes fails only when none of them has used CPU time
or written output for ``IDLE_S`` seconds: a hang, whatever the load.

Fault-injection seams the integration tests need live here too, each a fixture whose docstring names
the internal it patches (from ``gpt_models.internal``) and why no public route reaches that
moment, so the test files import public names only (``gpt_sigterm_after_loss_plot``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")

# `--doctest-modules` imports every source module: the two that need the lm-eval extra (one
# subclasses lm_eval's model class on import) are left out where it is not installed; `nox -s
# lm_eval` installs it and runs their doctests.
collect_ignore = (
    []
    if importlib.util.find_spec("lm_eval")
    else [
        "packages/gpt-models/src/gpt_models/_inference/lm_eval.py",
        "packages/gpt-models/src/gpt_models/_inference/lm_eval_model.py",
    ]
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "min_devices(n): needs at least n JAX devices; skipped, with the reason, on fewer",
    )
    config.addinivalue_line(
        "markers",
        "interop: compares with torch, transformers, peft or trl (skips where they are missing); "
        "`nox -s interop` installs them and runs exactly these tests (-m interop)",
    )
    config.addinivalue_line(
        "markers",
        "next_flag_gap(flag, reason): with that JAX flag on (JAX_NEXT_FLAGS), JAX itself computes "
        "this test's program wrongly; a strict xfail, so a JAX that fixes it makes the test fail",
    )
    _turn_on_next_flags()


# --- JAX's next primitives: `JAX_NEXT_FLAGS=jax_scan3,jax_remat3 pytest ...` -----------------
# JAX 0.12 has opt-in flags that make scan, checkpoint, custom_jvp and custom_vjp bind its next
# ("hijax") primitives; `nox -s next_primitives` runs the suites once per flag through this
# variable. A name this JAX does not have is an error: JAX ignores unknown JAX_* variables, so a
# typo (or a flag JAX removed) would quietly test nothing new.
_NEXT_FLAGS = [f for f in os.environ.get("JAX_NEXT_FLAGS", "").replace(",", " ").split() if f]
# JAX's own error for a transformation a next primitive does not implement yet (0.12: grad and
# vmap of Scan3): in the flag session a test that meets it is an expected failure, not ours.
_JAX_NOT_IMPLEMENTED = re.compile(r"for (\w+) support, subclass <class '[\w.]*?(\w+)'> must")


def _turn_on_next_flags() -> None:
    if not _NEXT_FLAGS:
        return
    import jax

    missing = [f for f in _NEXT_FLAGS if not hasattr(jax.config, f)]
    if missing:
        raise pytest.UsageError(
            f"JAX_NEXT_FLAGS names {missing}, which JAX {jax.__version__} does not have. "
            "Name JAX config flags such as jax_scan3 (comma-separated), on a JAX that has them "
            "(0.12+), or unset JAX_NEXT_FLAGS."
        )
    for flag in _NEXT_FLAGS:
        jax.config.update(flag, True)


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"JAX_NEXT_FLAGS: {', '.join(_NEXT_FLAGS)} on" if _NEXT_FLAGS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers("next_flag_gap"):
            flag, reason = marker.args
            if flag in _NEXT_FLAGS:
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"{flag}: {reason}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if not (_NEXT_FLAGS and report.when == "call" and report.failed and call.excinfo):
        return
    if not call.excinfo.errisinstance(NotImplementedError):
        return
    found = _JAX_NOT_IMPLEMENTED.search(str(call.excinfo.value))
    if found is not None:
        report.outcome = "skipped"
        report.wasxfail = f"JAX does not implement {found[1]} of {found[2]} yet"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "next_flag" in metafunc.fixturenames:
        from core_primitives.compat import NEXT_FLAGS

        metafunc.parametrize("next_flag", NEXT_FLAGS, indirect=True)


@pytest.fixture
def next_flag(request: pytest.FixtureRequest) -> object:
    """One of JAX's next-primitive flags (``core_primitives.compat.NEXT_FLAGS``), on for the test.

    Each test using it runs once per flag; skipped on a JAX without that flag in the form 0.12
    defines (``compat.next_flags()``).
    """
    import jax

    from core_primitives.compat import next_flags

    flag = request.param
    if flag not in next_flags():
        pytest.skip(f"JAX {jax.__version__} has no {flag} flag as JAX 0.12 defines it")
    before = getattr(jax.config, flag)
    jax.config.update(flag, True)
    try:
        yield flag
    finally:
        jax.config.update(flag, before)


def pytest_runtest_setup(item: pytest.Item) -> None:
    import jax

    # JAX's backends start before the first test of every test process, as in any program that
    # uses JAX before it calls gpt_models.main: an in-process `gpt train` then leaves the process's
    # memory allocator as it found it (host_memory.tune_host_allocator_for_cli tunes only a
    # process whose JAX has not started, as `gpt` on the command line is). Without this, whichever
    # test first started JAX in a pytest-xdist worker decided whether the next hundred in-process
    # runs switched glibc's malloc to one arena and no mmap; the `gpt` subprocesses of the tests
    # (test_host_memory.py's among them) still start tuned.
    jax.devices()
    for marker in item.iter_markers("min_devices"):
        (needed,) = marker.args
        if jax.device_count() < needed:
            pytest.skip(
                f"needs at least {needed} devices ({marker.kwargs.get('why', 'multi-device test')}); "
                f"{jax.device_count()} {jax.default_backend()} device(s) present"
            )


# --- a test whose pytest-xdist worker crashed runs once more, in a new worker ----------------------
# XLA:CPU segfaulted twice in CI on JAX 0.12 while compiling a small program in a long-lived
# worker (never reproduced; docs/decisions.md, "CI time, 2026-12-02"). xdist reports the crashed
# worker's test as failed and starts a new worker; the first crash of a test is reported as a rerun
# instead and the test is handed out again (`--dist worksteal` and `load`; `loadfile` hands out the
# crashed test's file again itself), so it passes or fails on that run. A second crash of the same
# test stands as a failure. The summary names every test this happened to.
_CRASHED: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    if crashitem in _CRASHED:
        return
    _CRASHED.append(crashitem)
    with contextlib.suppress(NotImplementedError):  # loadfile re-queues the file itself
        sched.mark_test_pending(crashitem)
    report.outcome = "rerun"  # type: ignore[assignment]


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    return ("rerun", "R", "RERUN") if report.outcome == "rerun" else None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for nodeid in _CRASHED:
        terminalreporter.write_line(
            f"worker crashed running {nodeid}; it ran again in a new worker (its result above)"
        )


def grid_for(n: int) -> tuple[int, int]:
    """(data, model) sizes covering `n` devices: 8 -> (2, 4), 4 -> (2, 2), 2 -> (2, 1), 1 -> (1, 1)."""
    return (2, n // 2) if n >= 2 and n % 2 == 0 else (1, n)


@pytest.fixture(scope="session")
def device_grid() -> tuple[int, int]:
    """A 2-D (data, model) mesh shape over every device present: (2, 4) on the 8 fake CPU devices."""
    import jax

    return grid_for(jax.device_count())


_PORTS_HANDED_OUT: set[int] = set()


def _distinct_free_ports(n: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        # Every socket stays bound until all n are chosen, so the kernel cannot hand one port out
        # twice; ports handed out earlier in the session are skipped as well.
        while len(sockets) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] in _PORTS_HANDED_OUT:
                s.close()
                continue
            sockets.append(s)
        ports = [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
    _PORTS_HANDED_OUT.update(ports)
    return ports


@pytest.fixture(scope="session")
def free_ports() -> Callable[[int], list[int]]:
    """``free_ports(n)``: n distinct localhost TCP ports nothing listens on, none handed out before.

    Picking ports one at a time can return the same port twice (each is free again once its probe
    socket closes): a test that points one process at a coordinator that is not there and another
    at one that is would then have them find each other.
    """
    return _distinct_free_ports


# `python -c` source: `gpt` with these argv, sending itself SIGTERM right after it draws loss.png.
_GPT_SIGTERM_AFTER_LOSS_PLOT = """
import os, signal, sys
from gpt_models.internal import training_loop as loop
real = loop.plot_losses
def plot_then_term(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
loop.plot_losses = plot_then_term
from gpt_models import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def gpt_sigterm_after_loss_plot() -> str:
    """Python source for ``python -c SOURCE ARGS``: ``gpt ARGS`` that sends itself SIGTERM right after
    ``gpt train`` draws loss.png, i.e. after the last step and before sample.txt is written.

    Patches, in that subprocess only, ``plot_losses`` in ``gpt_models.internal.training_loop``
    (the loss plot ``train`` draws once the steps are done). A test of a signal that lands after
    the last step needs that moment exactly; a ``kill`` timed from outside lands mid-step or after
    the exit.
    """
    return _GPT_SIGTERM_AFTER_LOSS_PLOT


# A process group with no CPU time and no output for this long is hung (a loaded machine slows a
# process down, it does not stop it: under a load of 9 on 2 cores each still gets CPU every second).
IDLE_S = 120.0
PEER_GRACE_S = 15.0  # how long the peers of a failed jax.distributed process get to exit themselves
_SCAN_S = 1.0  # how often /proc is read for the CPU time


def _cpu_seconds(roots: Sequence[int]) -> float | None:
    """CPU time (user + system, reaped children's too) of ``roots`` and their descendants, from
    /proc; None where /proc cannot tell (not Linux)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    tree, todo = set(), [p for p in roots if p in used]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [c for c, parent in parents.items() if parent == pid and c not in tree]
    return sum(used[p] for p in tree) / ticks if tree or not roots else None


@dataclasses.dataclass
class Patience:
    """Waits on subprocesses for as long as they make progress (see the module docstring)."""

    idle_s: float = IDLE_S
    peer_grace_s: float = PEER_GRACE_S

    def run(self, args: Sequence[str], *, check: bool = False, input: str | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess:  # fmt: skip
        """``subprocess.run`` with ``capture_output=True``, waited on patiently."""
        kwargs.pop("capture_output", None)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.PIPE if input is not None else None, **kwargs)  # fmt: skip
        ((out, err),) = self.communicate([proc], input=input)
        done = subprocess.CompletedProcess(args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def communicate(self, procs: Sequence[subprocess.Popen], *, input: str | None = None,
                    peers: bool = False) -> list[tuple[Any, Any]]:  # fmt: skip
        """Every process's ``(stdout, stderr)`` once all have exited; a hang kills them all and
        fails the test with the tail of what each wrote. ``peers``: processes that wait for each
        other (``jax.distributed``): once one has failed, the others get ``peer_grace_s`` to
        exit on their own and are then killed (they would wait for it until their own start-up
        timeout). Without the grace, of two peers that both refuse in the same millisecond the
        second was killed while it exited."""
        outputs = [_Drain(p, input) for p in procs]
        failed_at: list[float] = []

        def done() -> bool:
            if all(p.poll() is not None for p in procs):
                return True
            if peers and not failed_at and any(p.poll() not in (None, 0) for p in procs):
                failed_at.append(time.monotonic())
            return bool(failed_at) and time.monotonic() - failed_at[0] > self.peer_grace_s

        self.wait_for(done, procs, "their exit", outputs=outputs)
        for p in procs:
            if p.poll() is None:  # a peer failed: the rest would wait for it
                p.kill()
                p.wait()
        return [o.result() for o in outputs]

    def wait_for(self, predicate: Callable[[], bool], procs: Sequence[subprocess.Popen],
                 what: str, *, outputs: Sequence[_Drain] = ()) -> None:  # fmt: skip
        """Return once ``predicate()`` holds, while ``procs`` make progress; fail the test when
        they have not for ``idle_s`` seconds."""
        last_cpu, last_out, since = None, -1, time.monotonic()
        checked = since
        while not predicate():
            if procs and all(p.poll() is not None for p in procs) and not predicate():
                tails = "\n".join(o.tail() for o in outputs)
                codes = ", ".join(str(p.returncode) for p in procs)
                pytest.fail(f"the process(es) exited ({codes}) before {what}.\n{tails}")
            time.sleep(0.05)  # the predicate is checked often (a test may act the moment it holds)
            if time.monotonic() - checked < _SCAN_S:
                continue
            checked = time.monotonic()
            cpu = _cpu_seconds([p.pid for p in procs if p.poll() is None])
            out = sum(o.size for o in outputs)
            if cpu is None or cpu != last_cpu or out != last_out:
                last_cpu, last_out, since = cpu, out, checked
            elif checked - since > self.idle_s:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                tails = "\n".join(o.tail() for o in outputs)
                pytest.fail(
                    f"Waiting for {what}: the process(es) made no progress (no CPU time, no "
                    f"output) for {self.idle_s:.0f} s, killed.\n{tails}"
                )


class _Drain:
    """A process's stdout and stderr, read in threads as they come (so that pipes never fill), and
    given back as ``subprocess`` would (text decoded with universal newlines in text mode)."""

    def __init__(self, proc: subprocess.Popen, input: Any) -> None:
        self.proc, self.size = proc, 0
        self.pipes = {"out": proc.stdout, "err": proc.stderr}
        self.parts: dict[str, list[bytes]] = {"out": [], "err": []}
        self.threads = [
            threading.Thread(target=self._read, args=(pipe, name), daemon=True)
            for name, pipe in self.pipes.items()
            if pipe is not None
        ]
        for t in self.threads:
            t.start()
        if input is not None and proc.stdin is not None:
            proc.stdin.write(input)
            proc.stdin.close()

    def _read(self, pipe: Any, name: str) -> None:
        raw = getattr(pipe, "buffer", pipe)  # a text pipe's bytes, read as they come
        while chunk := raw.read1(65536):
            self.parts[name].append(chunk)
            self.size += len(chunk)

    def result(self) -> tuple[Any, Any]:
        for t in self.threads:
            t.join()
        return self._value("out"), self._value("err")

    def _value(self, name: str) -> Any:
        pipe = self.pipes[name]
        if pipe is None:
            return None
        data = b"".join(self.parts[name])
        if not hasattr(pipe, "buffer"):
            return data
        return io.TextIOWrapper(io.BytesIO(data), encoding=pipe.encoding, errors=pipe.errors).read()

    def tail(self) -> str:
        return b"".join(self.parts["out"] + self.parts["err"]).decode(errors="replace")[-3000:]


@pytest.fixture(scope="session")
def patience() -> Patience:
    """Run and wait on subprocesses while they make progress: ``patience.run(args, **popen)``
    (``subprocess.run`` with captured output), ``patience.communicate(procs)`` and
    ``patience.wait_for(predicate, procs, what)``; a group idle for ``IDLE_S`` s fails the test."""
    return Patience()
