"""What ``gpt`` does before its command: the CPU restart's decision, its off switch and its clean-up,
and the first Ctrl-C stopping a command at any moment of its start."""

import os
import signal
import subprocess
import sys
import time

import pytest

from gpt_models.internal import launcher

START = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0"
LINUX = ("Linux", "glibc")


def _decide(env, command="train", platform_=LINUX, cpu_only=True):
    return launcher.restart_environment(
        env, command=command, platform_=platform_, cpu_only=cpu_only
    )


def test_gpt_train_on_cpu_restarts_with_the_start_up_tunables():
    env = _decide({"PATH": "/bin"})
    assert env["GLIBC_TUNABLES"] == START and env["PATH"] == "/bin"


@pytest.mark.parametrize(
    ("env", "kw"),
    [
        ({"GPT_CPU_RESTART": "0"}, {}),  # the off switch
        ({}, {"command": "sample"}),  # only train keeps a heap between steps
        ({}, {"platform_": ("Darwin", "")}),
        ({}, {"platform_": ("Linux", "musl")}),
        ({}, {"cpu_only": False}),  # an accelerator, or JAX started already
        ({"MALLOC_ARENA_MAX": "8"}, {}),  # the user's own malloc settings win
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, {}),
    ],
)
def test_no_restart_where_it_does_not_apply(env, kw):
    assert _decide(env, **kw) is None


def test_the_restarted_process_does_not_restart_again_and_hands_children_a_clean_environment():
    env = _decide({"PATH": "/bin"})
    assert _decide(env) is None  # a restarted process is marked
    assert launcher.settle_after_restart(env) is True
    assert env == {"PATH": "/bin"}  # programs it starts inherit no tunables of ours
    assert launcher.settle_after_restart(env) is False


def test_the_restart_is_decided_without_importing_jax(monkeypatch):
    # Importing JAX only to learn that it had not started took seconds that the restarted process
    # spent again, and a Ctrl-C in that import waited for its end. Here JAX is made "not imported"
    # (its modules out of sys.modules for this test; monkeypatch puts them back).
    for name in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert launcher._cpu_only() is True
    assert "jax" not in sys.modules


def test_a_bad_off_switch_is_one_line_naming_it(patience):
    with pytest.raises(ValueError, match=r"GPT_CPU_RESTART='yes': expected 0 .* or 1 "):
        _decide({"GPT_CPU_RESTART": "yes"})
    proc = patience.run(
        [sys.executable, "-m", "gpt_models", "train", "--dry-run"],
        env=os.environ | {"GPT_CPU_RESTART": "yes"},
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpt: error: GPT_CPU_RESTART='yes': expected 0 (gpt train does not restart itself with "
        "glibc's start-up tunables) or 1 (it does, on CPU; the default). Set one of them, or "
        "unset GPT_CPU_RESTART."
    ]


def test_a_failed_restart_says_so_and_goes_on(monkeypatch, capsys):
    def refuse(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(launcher.os, "execve", refuse)
    monkeypatch.setattr(launcher.platform, "system", lambda: "Linux")
    monkeypatch.setattr(launcher.platform, "libc_ver", lambda: ("glibc", "2.36"))
    for name in ("GPT_CPU_RESTART", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(launcher, "_cpu_only", lambda: True)
    launcher.restart_if_useful("train")  # returns: the command goes on
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpt: note: could not restart with glibc's start-up tunables ([Errno 13] Permission "
        "denied); training goes on without them, and its peak memory may differ between runs. "
        "GPT_CPU_RESTART=0 skips the restart."
    ]


def _interrupt_at(
    tmp_path, patience, seconds: float, *extra: str
) -> tuple[subprocess.CompletedProcess, float]:
    """``gpt train`` (3,000 small steps) sent SIGINT ``seconds`` after it starts; its result and
    how long it took from the signal to its exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt_models", "train", "--name", "x", "--set", "train.steps=3000",
         "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.seq_len=32",
         "--set", "train.batch_size=8", *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a test runner started in the background ignores SIGINT, and a
        # child would inherit that (gpt honours an ignored SIGINT, as background jobs expect).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(seconds)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    ((out, err),) = patience.communicate([proc])
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, out, err
    ), time.monotonic() - sent


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [1.0, 3.0])
def test_ctrl_c_at_start_stops_gpt_train_within_seconds(tmp_path, patience, seconds):
    proc, took = _interrupt_at(tmp_path, patience, seconds)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("gpt: interrupted (Ctrl-C)")
    assert took < 60  # seconds, not the run's minutes (it was 74.5 s, every step trained)
    run = tmp_path / "runs" / "x"
    if run.exists():  # a run folder left behind is one --auto-resume accepts
        again = patience.run(
            [sys.executable, "-m", "gpt_models", "train", "--name", "x", "--auto-resume",
             "--dry-run", "--set", "train.steps=3000", "--set", "model.d_model=32",
             "--set", "model.n_layers=1", "--set", "model.seq_len=32",
             "--set", "train.batch_size=8"],
            cwd=tmp_path, text=True,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr


def test_ctrl_c_while_the_command_loads_ends_the_program_at_once(tmp_path, patience):
    # An import that takes long (JAX's and orbax's do under load): the Ctrl-C that lands in it ends
    # the program at once, as nothing of the command has started; elsewhere it waits for the import.
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(120)\n"
    )
    code = (
        "import sys\nsys.path.insert(0, sys.argv[1])\n"
        "from gpt_models.internal import launcher\nlauncher.stop_on_first_interrupt()\n"
        "with launcher.loading_the_command():\n    import slow_module\nprint('imported')\n"
    )
    started = time.monotonic()
    done = patience.run(
        [sys.executable, "-c", code, str(tmp_path)], text=True,
        # As from a terminal (see _interrupt_at): a runner in the background ignores SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "gpt: interrupted (Ctrl-C); stopped before finishing."
    assert "imported" not in done.stdout
    assert took < 100  # not the import's 120 s (the interpreter's start-up alone takes seconds)
