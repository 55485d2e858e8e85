"""tune_host_allocator / keep_host_memory: each step's scratch memory is reused, not faulted in anew.

The page-fault checks run in fresh interpreters (the allocator must be set before JAX starts) with a
jitted gradient whose scratch buffer (200 MB of intermediates) is larger than glibc's per-thread
heaps, the case of a train step.
"""

import os
import platform
import subprocess
import sys

import pytest

import gpt_models

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt tuning exists only with glibc on Linux",
)

_FAULTS_PER_CALL = """
import os, resource, sys
import gpt_models
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
tuned = gpt_models.tune_host_allocator() if sys.argv[1] == "tune" else False
import jax, jax.numpy as jnp
x = jnp.ones((32768, 512), jnp.float32) / 512
w = jnp.eye(512, dtype=jnp.float32)
g = lambda x, w: jax.grad(lambda x: jnp.tanh(jnp.tanh(x @ w) @ w).sum())(x)[0]
f = jax.jit(g).lower(x, w).compile()
for _ in range(2):
    f(x, w).block_until_ready()
kept = gpt_models.keep_host_memory()
for _ in range(2):
    with gpt_models.await_scratch(f):  # as gpt train: the scratch is free again on leaving
        f(x, w).block_until_ready()
before = rss()
if sys.argv[2:] == ["release"]:
    kept = gpt_models.keep_host_memory(False)
given_back = round((before - rss()) / f.memory_analysis().temp_size_in_bytes, 2)
faults = []
for _ in range(4):  # the fewest of 4 calls: the heap may still grow once while it settles
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(x, w).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(tuned, kept, min(faults), given_back)
"""


_patience = None  # the root conftest's, for the module's helpers (see _set_patience)


@pytest.fixture(autouse=True)
def _set_patience(patience):
    # Each test's subprocess is waited on while it makes progress, not for a fixed time.
    global _patience
    _patience = patience


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return _patience.run(args, **kwargs)


def _untuned_env() -> dict[str, str]:
    """This environment without the user's malloc settings (they would turn our tuning off)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}


def _faults_per_call(mode: str, *then: str, **env: str) -> tuple[str, str, int, float]:
    """(tuned, kept, the fewest page faults of 4 calls, RSS given back by ``then`` in scratch
    buffers)."""
    proc = _run(
        [sys.executable, "-c", _FAULTS_PER_CALL, mode, *then],
        env=_untuned_env() | {"XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"} | env,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    tuned, kept, faults, given_back = proc.stdout.split()
    return tuned, kept, int(faults), float(given_back)


@glibc_only
def test_tuned_allocator_reuses_the_scratch_buffer():
    tuned, kept, faults, given_back = _faults_per_call("tune")
    assert (tuned, kept) == ("True", "True") and given_back < 0.1
    assert faults < 2_000  # 200 MB of scratch would be 49,000 fresh 4 KiB pages


@glibc_only
def test_default_allocator_faults_the_scratch_buffer_in_every_call():
    # What the tuning removes (and what makes the test above able to fail).
    tuned, kept, faults, _ = _faults_per_call("plain")
    assert (tuned, kept) == ("False", "False")
    assert faults > 10_000


@glibc_only
def test_released_allocator_gives_the_scratch_buffer_back_again():
    # keep_host_memory(False), as gpt train around evaluations and after its last step: the kept
    # heap's free pages go back to the system at once (the scratch buffer's, freed after the last
    # call), so what runs next does not stack its own scratch on top of a heap never trimmed.
    # (Whether a later call faults its scratch in again depends on where glibc finds room for it
    # in the heap, so page faults after the release are not a stable measure.)
    tuned, kept, _, given_back = _faults_per_call("tune", "release")
    assert (tuned, kept) == ("True", "False")
    assert given_back > 0.75  # of one scratch buffer (0 without the release: the next test)


def _thp_madvise_available() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


@glibc_only
@pytest.mark.skipif(not _thp_madvise_available(), reason="transparent huge pages are off")
def test_huge_page_tunable_faults_the_scratch_buffer_in_2_mib_pages():
    # The memory-saving alternative docs/gpt_models.md names: GLIBC_TUNABLES turns our tuning off
    # (the scratch buffer is mmapped per call again) and glibc.malloc.hugetlb=1 backs it with
    # 2 MiB pages: a few hundred faults per call instead of 49,000.
    tuned, kept, faults, _ = _faults_per_call("tune", GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
    assert (tuned, kept) == ("False", "False")
    assert faults < 5_000


@glibc_only
def test_user_malloc_settings_win():
    tuned, kept, _, _ = _faults_per_call("tune", MALLOC_ARENA_MAX="4")
    assert (tuned, kept) == ("False", "False")


@glibc_only
def test_malloc_arena_max_1_in_the_environment_counts_as_tuned():
    # One arena from the process's start is what tune_host_allocator sets, only earlier: kept.
    tuned, kept, faults, _ = _faults_per_call("tune", MALLOC_ARENA_MAX="1")
    assert (tuned, kept) == ("True", "True") and faults < 2_000


def test_tuning_after_jax_started_is_refused_with_how_to_fix():
    import jax

    jax.devices()
    with pytest.raises(
        RuntimeError,
        match=r"after JAX started its backends.*Call it first, before jax\.devices\(\)",
    ):
        gpt_models.tune_host_allocator()


_AWAIT_SCRATCH = """
import ctypes, sys, time
import gpt_models
gpt_models.tune_host_allocator()
import jax, jax.numpy as jnp, numpy as np

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks "
                "uordblks fordblks keepcost".split()]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
x = jnp.ones((32768, 512), jnp.float32) / 512
w = jnp.eye(512, dtype=jnp.float32)
f = lambda x, w: jax.grad(lambda x: jnp.tanh(jnp.tanh(x @ w) @ w).sum())(x)[0]
step = jax.jit(f).lower(x, w).compile()
step(x, w).block_until_ready()
gpt_models.keep_host_memory()
scratch = step.memory_analysis().temp_size_in_bytes
over, returned = [], []
for _ in range(10):
    before = mallinfo2().uordblks
    with gpt_models.await_scratch(step) as waited:
        step(x, w).block_until_ready()
    over.append(mallinfo2().uordblks - before)
    returned.append(waited.returned)
# Memory still held when the step ends (here an array as large as the scratch): it gives up.
t0 = time.perf_counter()
with gpt_models.await_scratch(step, timeout=0.1) as held:
    step(x, w).block_until_ready()
    kept_alive = np.ones(scratch // 8)
print(scratch, max(over), all(returned), held.returned, round(time.perf_counter() - t0, 2))
"""


@glibc_only
@pytest.mark.skipif(
    not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"), reason="mallinfo2 needs glibc 2.33+"
)
def test_await_scratch_starts_the_next_step_only_once_the_scratch_buffer_is_free():
    # gpt train wraps each kept step in await_scratch: XLA frees the scratch just after the
    # outputs are ready, and a step dispatched in between grew the kept heap by a whole buffer.
    proc = _run(
        [sys.executable, "-c", _AWAIT_SCRATCH], env=_untuned_env() | {"JAX_PLATFORMS": "cpu"},
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    scratch, over, returned, held_returned, held_took = proc.stdout.split()
    assert int(scratch) > 100 * 2**20
    assert int(over) < int(scratch) // 2  # on leaving, the heap holds no step's scratch
    assert returned == "True"
    assert held_returned == "False" and 0.1 <= float(held_took) < 5


_SPLIT_SCRATCH = """
import ctypes
import gpt_models
gpt_models.tune_host_allocator()
import jax, jax.numpy as jnp

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks "
                "uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
x = jnp.ones((32768, 512), jnp.float32) / 512
w = jnp.eye(512, dtype=jnp.float32)
f = lambda x, w: jax.grad(lambda x: jnp.tanh(jnp.tanh(x @ w) @ w).sum())(x)[0]
step = jax.jit(f).lower(x, w).compile()
step(x, w).block_until_ready()
gpt_models.keep_host_memory()
scratch = step.memory_analysis().temp_size_in_bytes

def one_step():
    with gpt_models.await_scratch(step):
        step(x, w).block_until_ready()

one_step()
# A free block a little larger than a scratch buffer below the top of the heap, as the compiler's
# freed memory leaves them: the next steps' scratch goes there.
hole = libc.malloc(scratch + 2**20)
above = libc.malloc(2**20)
libc.free(hole)
one_step()
heap = libc.mallinfo2().arena
held = libc.malloc(scratch * 3 // 8)  # between two steps, a block that stays
for _ in range(3):
    one_step()
print(round((libc.mallinfo2().arena - heap) / scratch, 2))
"""


@glibc_only
@pytest.mark.skipif(
    not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"), reason="mallinfo2 needs glibc 2.33+"
)
def test_an_allocation_between_steps_does_not_split_the_free_scratch_buffer():
    # glibc serves a request from the smallest free block that holds it. A block allocated between
    # two steps that only the free scratch buffer could hold splits it, the next step's scratch no
    # longer fits there, and the heap grows by a whole buffer that stays (gpt train, tiny preset:
    # 1.00 GiB of RSS instead of 0.70 in about 4 runs of 10). await_scratch leaves a free block of
    # half a scratch in the heap for such requests. Without it, these steps grew the heap by one
    # scratch buffer in 3 of 4 runs (with it: none of 6).
    # Started as gpt train restarts itself, so that only the block held between steps can keep
    # the freed scratch from being reused (the next test says why).
    env = _untuned_env() | {"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": START_TUNABLES}
    proc = _run(
        [sys.executable, "-c", _SPLIT_SCRATCH],
        env=env, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) < 0.25  # growth of the heap, in scratch buffers


START_TUNABLES = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0"  # as docs/gpt_models.md

_LOG_STARTS = """
import os
with open(os.environ["STARTS_LOG"], "a") as f:
    f.write(f"{os.getpid()} {os.environ.get('GLIBC_TUNABLES', '-')}\\n")
"""


def _starts(tmp_path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``python -m gpt_models ARGV``; each interpreter start logs ``PID GLIBC_TUNABLES``."""
    (tmp_path / "sitecustomize.py").write_text(_LOG_STARTS)
    log = tmp_path / "starts.log"
    env = _untuned_env() | {"PYTHONPATH": str(tmp_path), "STARTS_LOG": str(log)} | env
    proc = _run(
        [sys.executable, "-m", "gpt_models", *argv],
        env=env | {"JAX_PLATFORMS": "cpu"}, text=True,
    )  # fmt: skip
    return proc, log.read_text().splitlines()


@glibc_only
def test_gpt_train_restarts_once_with_the_start_up_tunables(tmp_path):
    # glibc's per-thread cache of freed blocks can only be turned off when a process starts: it
    # held the bytes cut off either side of XLA's aligned scratch buffer, the freed buffer could
    # not merge with the memory around it, and about 4 runs in 10 kept a second one.
    proc, starts = _starts(tmp_path, "train", "--set", "no.such=1")
    assert proc.returncode == 2 and proc.stderr.count("gpt: error: Unknown config key") == 1
    (pid, before), (same_pid, after) = (line.split() for line in starts)
    assert (before, after) == ("-", START_TUNABLES) and pid == same_pid


@glibc_only
@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (("train", "--set", "no.such=1"), {"MALLOC_ARENA_MAX": "8"}),  # the user's settings win
        (("train", "--set", "no.such=1"), {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
        (("sample", "no-such-run"), {}),  # only train keeps a heap between steps
    ],
)
def test_gpt_starts_once_where_the_start_up_tunables_do_not_apply(tmp_path, argv, env):
    proc, starts = _starts(tmp_path, *argv, **env)
    assert proc.returncode == 2 and "gpt: error:" in proc.stderr
    assert len(starts) == 1 and starts[0].split()[1] == env.get("GLIBC_TUNABLES", "-")


@glibc_only
def test_start_up_tunables_count_as_tuned():
    # A script started with them (as gpt train restarts itself) keeps its scratch memory too.
    tuned, kept, faults, _ = _faults_per_call("tune", GLIBC_TUNABLES=START_TUNABLES)
    assert (tuned, kept) == ("True", "True") and faults < 2_000


def test_await_scratch_asks_xla_for_the_scratch_size_once_per_compiled_step():
    # XLA's memory analysis costs the main thread 8-9 ms a call; gpt train enters await_scratch
    # at every step, and on a 2-core machine that time was taken from the step's own threads.
    class Compiled:
        calls = 0

        def memory_analysis(self):
            Compiled.calls += 1
            return type("Analysis", (), {"temp_size_in_bytes": 123})()

    step = Compiled()
    for _ in range(3):
        assert gpt_models.await_scratch(step).scratch == 123
    assert Compiled.calls == 1
    other = Compiled()
    gpt_models.await_scratch(other)
    assert Compiled.calls == 2  # per compiled step, not one size for all
