"""Loggers: pure init/log/finish under jit, vmap (one run per lane) and scan; each backend."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lox
from lox import (
    ConsoleLogger,
    HostLogger,
    Logger,
    LoggerState,
    MultiLogger,
    SaveLogger,
    WandbLogger,
    load,
    logdict,
)


def tolist(tree):
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def metrics(loss, step):
    return logdict({"loss": jnp.asarray([loss])}, {"loss": {"step": jnp.asarray([step])}})


class Recorder(HostLogger):
    """Records what reaches the host: (run, key data, logs) per call."""

    def __init__(self):
        super().__init__()
        self.opened, self.written, self.closed = [], [], []

    def open_run(self, run, key):
        self.opened.append((run, None if key is None else key.tolist()))
        return f"handle{run}"

    def write_run(self, handle, run, logs):
        self.written.append((handle, run, tolist(dict(logs)), tolist(logs.steps)))

    def close_run(self, handle, run):
        self.closed.append((handle, run))


def done(tree):
    jax.block_until_ready(tree)
    jax.effects_barrier()
    return tree


# -- the pure protocol on the host-logger machinery ------------------------------------------------


def test_state_is_a_pytree_of_arrays():
    state = Recorder().init()
    leaves = jax.tree.leaves(state)
    assert isinstance(state, LoggerState)
    assert [(x.shape, x.dtype) for x in leaves] == [((), jnp.int32)]


def test_eager_jit_and_scan_logging_in_order():
    rec = Recorder()
    state = rec.init()
    state = rec.log(state, metrics(1.0, 0))
    state = jax.jit(rec.log)(state, metrics(2.0, 1))

    def body(s, i):
        return rec.log(s, metrics(i.astype(jnp.float32), i)), None

    state, _ = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(2, 5)))(state)
    rec.finish(done(state))
    assert [w[2]["loss"] for w in rec.written] == [[1.0], [2.0], [2.0], [3.0], [4.0]]
    assert [w[3]["loss"]["step"] for w in rec.written] == [[0], [1], [2], [3], [4]]
    assert {w[:2] for w in rec.written} == {("handle0", 0)}
    assert rec.closed == [("handle0", 0)]


def test_jit_init_starts_a_new_run_each_call():
    rec = Recorder()
    init = jax.jit(rec.init)
    runs = [int(init().run), int(init().run)]
    assert runs == [0, 1]


def test_vmap_gives_one_run_per_lane_and_passes_keys():
    rec = Recorder()
    keys = jax.random.split(jax.random.key(0), 3)
    states = jax.vmap(rec.init)(keys)
    assert tolist(states.run) == [0, 1, 2]
    assert [k for _, k in rec.opened] == tolist(jax.random.key_data(keys))
    batch = jax.vmap(metrics)(jnp.array([1.0, 2.0, 3.0]), jnp.array([7, 8, 9]))
    states = done(jax.jit(jax.vmap(rec.log))(states, batch))
    assert sorted((w[1], w[2]["loss"], w[3]["loss"]["step"]) for w in rec.written) == [
        (0, [1.0], [7]),
        (1, [2.0], [8]),
        (2, [3.0], [9]),
    ]
    # Unbatched logs under a batched state go to every lane.
    done(jax.vmap(rec.log, in_axes=(0, None))(states, metrics(5.0, 1)))
    assert sorted(w[1] for w in rec.written[3:]) == [0, 1, 2]
    rec.finish(states)  # eager finish of a batched state closes every run
    assert sorted(run for _, run in rec.closed) == [0, 1, 2]


def test_vmapped_finish_and_raw_keys():
    rec = Recorder()
    states = jax.vmap(rec.init)(jnp.array([[0, 1], [0, 2]], jnp.uint32))
    assert [k for _, k in rec.opened] == [[0, 1], [0, 2]]
    jax.vmap(rec.finish)(states)
    jax.effects_barrier()
    assert sorted(run for _, run in rec.closed) == [0, 1]


def test_log_argument_errors():
    rec = Recorder()
    state = rec.init()
    with pytest.raises(TypeError, match=r"Recorder.log: expected a lox.logdict, got dict"):
        rec.log(state, {"loss": jnp.zeros(1)})
    with pytest.raises(TypeError, match=r"expected the LoggerState returned by Recorder.init"):
        rec.log(jnp.int32(0), metrics(1.0, 0))
    states = jax.vmap(rec.init)(jnp.arange(2))
    with pytest.raises(ValueError, match=r"state holds 2 runs .*jax.vmap\(logger.log\)"):
        rec.log(states, metrics(1.0, 0))
    rec.finish(state)
    with pytest.raises(ValueError, match=r"run 0 is not open in this logger .*finished already"):
        rec.log(state, metrics(1.0, 0))


# -- ConsoleLogger -------------------------------------------------------------------------------


def console_lines(logs):
    """The lines a ConsoleLogger prints for ``logs`` (one run, logged eagerly)."""
    lines = []
    logger = ConsoleLogger(print_fn=lines.append)
    state = logger.log(logger.init(), logs)
    logger.finish(state)
    return lines


def test_console_summarises_scalars_arrays_and_odd_dtypes():
    # One event per key: each value below is one event of the shape in the comment.
    logs = logdict(
        {
            "f": np.array([0.123456], np.float32),  # ()
            "i": np.array([[7]], np.int32),  # (1,): one element shows as a number
            "b": np.array([True]),  # ()
            "m": np.arange(4.0).reshape(1, 2, 2),  # (2, 2)
            "v": np.array([[True, False]]),  # (2,) of bool: no statistics
            "e": np.zeros((1, 0, 2)),  # (0, 2): empty
        }
    )
    assert console_lines(logs) == [
        "b=True | e=float64[0,2] | f=0.1235 | i=7 | m=float64[2,2](mean=1.5 min=0 max=3) | "
        "v=bool[2]"
    ]


def test_console_groups_by_steps_and_names_pytree_leaves():
    logs = logdict(
        {
            "loss": np.array([2.0, 1.0], np.float32),
            "p": {"w": np.ones((2, 3), np.float32)},
            "raw": np.array([1.0, 5.0, 3.0]),
            "once": np.array([4]),
        },
        {"loss": {"step": np.array([0, 1])}, "p": {"step": np.array([0, 1])}},
    )
    assert console_lines(logs) == [
        "step=0 | loss=2 | p/w=float32[3](mean=1 min=1 max=1)",
        "step=1 | loss=1 | p/w=float32[3](mean=1 min=1 max=1)",
        "once=4",
        "raw=[3 events] float64[3](mean=3 min=1 max=5)",
    ]


def test_console_logger_prints_eagerly_and_under_jit(capsys):
    logger = ConsoleLogger()
    state = logger.init()
    state = logger.log(state, metrics(0.25, 3))
    done(jax.jit(logger.log)(state, metrics(0.5, 4)))
    assert capsys.readouterr().out == "step=3 | loss=0.25\nstep=4 | loss=0.5\n"
    logger.finish(state)


def test_console_logger_vmap_prefixes_runs_and_custom_print():
    lines = []
    logger = ConsoleLogger(print_fn=lines.append, precision=2)
    states = jax.vmap(logger.init)(jnp.arange(2))
    batch = jax.vmap(metrics)(jnp.array([1.234, 5.678]), jnp.array([0, 0]))
    done(jax.vmap(logger.log)(states, batch))
    assert sorted(lines) == ["[run 0] step=0 | loss=1.2", "[run 1] step=0 | loss=5.7"]
    logger.finish(states)


# -- SaveLogger ----------------------------------------------------------------------------------


def test_save_logger_one_folder_per_run_and_resume(tmp_path):
    logger = SaveLogger(tmp_path)
    states = jax.vmap(logger.init)(jnp.arange(2))
    log = jax.jit(jax.vmap(logger.log))
    for step in range(3):
        batch = jax.vmap(metrics)(jnp.array([step, 10.0 + step]), jnp.array([step, step]))
        states = log(states, batch)
    logger.finish(states)
    assert sorted(os.listdir(tmp_path)) == ["run_0", "run_1"]
    assert tolist(load(tmp_path / "run_1")["loss"]) == [10.0, 11.0, 12.0]
    assert tolist(load(tmp_path / "run_0").steps["loss"]["step"]) == [0, 1, 2]
    # A resumed job building the same logger appends to the same runs.
    again = SaveLogger(tmp_path)
    state = again.init()
    again.finish(again.log(state, metrics(99.0, 3)))
    assert tolist(load(tmp_path / "run_0")["loss"]) == [0.0, 1.0, 2.0, 99.0]
    assert again.run_path(1) == os.path.join(str(tmp_path), "run_1")


# -- WandbLogger ---------------------------------------------------------------------------------


class RecordingRun:
    def __init__(self):
        self.rows = []

    def log(self, row):
        self.rows.append(row)

    def finish(self):
        pass


def test_wandb_rows_group_by_steps_and_index(monkeypatch):
    wandb = pytest.importorskip("wandb")
    run = RecordingRun()
    monkeypatch.setattr(wandb, "init", lambda **kw: run)
    monkeypatch.setattr(wandb, "Histogram", lambda x: ("hist", x.shape))
    logs = logdict(
        {
            "a": np.array([1.0, 2.0]),
            "b": np.array([3, 4]),
            "h": np.ones((2, 3)),
            "p": {"w": np.array([5.0, 6.0])},
        },
        {"a": {"step": np.array([0, 1])}, "p": {"step": np.array([1, 2])}},
    )
    logger = WandbLogger(project="x")
    logger.finish(logger.log(logger.init(), logs))
    assert run.rows == [
        {"step": 0, "a": 1.0},
        {"step": 1, "a": 2.0, "p/w": 5.0},
        {"b": 3, "h": ("hist", (3,))},
        {"b": 4, "h": ("hist", (3,))},
        {"step": 2, "p/w": 6.0},
    ]


@pytest.mark.parametrize("mode", ["disabled", "offline"])
def test_wandb_logger_one_run_per_lane(tmp_path, monkeypatch, mode):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", mode)
    monkeypatch.setenv("WANDB_SILENT", "true")
    # wandb reads WANDB_MODE once per process (its settings singleton), so pass it too.
    logger = WandbLogger(project="lox-test", dir=str(tmp_path), mode=mode)
    states = jax.vmap(logger.init)(jnp.arange(2))
    runs = logger.runs()
    assert sorted(runs) == [0, 1]
    assert runs[0] is not runs[1]
    batch = jax.vmap(metrics)(jnp.array([1.0, 2.0]), jnp.array([0, 0]))
    states = done(jax.jit(jax.vmap(logger.log))(states, batch))
    logger.finish(states)
    assert logger.runs() == {}
    if mode == "offline":
        offline = [d for d in os.listdir(tmp_path / "wandb") if d.startswith("offline-run")]
        assert len(offline) == 2


class FailingRun:
    def log(self, row):
        raise ConnectionError("network is down")

    def finish(self):
        raise ConnectionError("still down")


def test_wandb_failures_only_warn(monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setattr(wandb, "init", lambda **kw: FailingRun())
    logger = WandbLogger(project="x")
    state = logger.init()
    with pytest.warns(RuntimeWarning, match=r"wandb log failed for run 0 with ConnectionError"):
        state = done(jax.jit(logger.log)(state, metrics(1.0, 0)))
    state = done(jax.jit(logger.log)(state, metrics(2.0, 1)))  # reported once per run: silent
    with pytest.warns(RuntimeWarning, match=r"wandb finish failed.*Training continues"):
        logger.finish(state)


def test_wandb_init_failure_only_warns(monkeypatch):
    wandb = pytest.importorskip("wandb")

    def broken_init(**kwargs):
        raise RuntimeError("bad api key")

    monkeypatch.setattr(wandb, "init", broken_init)
    logger = WandbLogger()
    with pytest.warns(RuntimeWarning, match=r"wandb init failed for run 0 with RuntimeError: bad"):
        state = done(logger.init())
    state = logger.log(state, metrics(1.0, 0))  # logs nothing, raises nothing
    logger.finish(state)
    with pytest.warns(RuntimeWarning, match=r"wandb log failed for run 0.*not open"):
        logger.log(state, metrics(1.0, 0))  # a finished run: still never stops training


def test_wandb_missing_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'lox-logging\[wandb\]'"):
        WandbLogger()


# -- MultiLogger and user subclasses --------------------------------------------------------------


def test_multi_logger_fans_out(tmp_path, capsys):
    logger = MultiLogger(ConsoleLogger(), SaveLogger(tmp_path))
    state = logger.init()
    assert isinstance(state, tuple)
    assert len(state) == 2
    state = done(jax.jit(logger.log)(state, metrics(0.5, 1)))
    logger.finish(state)
    assert capsys.readouterr().out == "step=1 | loss=0.5\n"
    assert tolist(load(tmp_path / "run_0")["loss"]) == [0.5]


def test_multi_logger_vmap(tmp_path):
    lines = []
    logger = MultiLogger(ConsoleLogger(print_fn=lines.append), SaveLogger(tmp_path))
    states = jax.vmap(logger.init)(jnp.arange(2))
    batch = jax.vmap(metrics)(jnp.array([1.0, 2.0]), jnp.array([0, 0]))
    logger.finish(done(jax.vmap(logger.log)(states, batch)))
    assert sorted(lines) == ["[run 0] step=0 | loss=1", "[run 1] step=0 | loss=2"]
    assert tolist(load(tmp_path / "run_1")["loss"]) == [2.0]


def test_multi_logger_errors():
    with pytest.raises(TypeError, match=r"argument 1 is str, expected a lox.Logger"):
        MultiLogger(ConsoleLogger(), "wandb")
    logger = MultiLogger(ConsoleLogger(), ConsoleLogger())
    with pytest.raises(TypeError, match=r"expected a tuple of 2 states .*got 1 states"):
        logger.log((logger.loggers[0].init(),), metrics(1.0, 0))


class Counter(Logger):
    """A user logger with only init/log/finish: counts events in its state."""

    def init(self, key=None):
        return jnp.zeros((), jnp.int32)

    def log(self, state, logs):
        return state + sum(jax.tree.leaves(v)[0].shape[0] for v in logs.values())

    def finish(self, state):
        pass


def test_user_subclass_needs_only_three_methods():
    logger = Counter()
    state = jax.jit(logger.log)(logger.init(), metrics(1.0, 0) + metrics(2.0, 1))
    assert int(state) == 2
    with pytest.raises(TypeError, match="abstract"):
        Logger()


# -- logger.spool / logger.tap ---------------------------------------------------------------------


def train_step(x, i):
    lox.log({"loss": x * 2.0}, step=i)
    return x + 1.0


def test_logger_spool_returns_output_and_new_state():
    rec = Recorder()
    out, state = rec.spool(train_step, rec.init())(jnp.float32(1.0), 5)
    done(state)
    assert float(out) == 2.0
    assert rec.written[-1][2:] == ({"loss": [2.0]}, {"loss": {"step": [5]}})
    assert isinstance(state, LoggerState)


def test_logger_spool_under_vmap_one_run_per_lane():
    rec = Recorder()
    states = jax.vmap(rec.init)(jnp.arange(2))
    step = jax.jit(jax.vmap(lambda s, x: rec.spool(train_step, s)(x, 0)))
    out, states = step(states, jnp.array([1.0, 2.0]))
    done(states)
    assert tolist(out) == [2.0, 3.0]
    assert sorted((w[1], w[2]["loss"]) for w in rec.written) == [(0, [2.0]), (1, [4.0])]


def test_logger_tap_streams_to_the_run(capsys):
    logger = ConsoleLogger()
    state = logger.init()
    out, same = jax.jit(logger.tap(train_step, state))(jnp.float32(1.0), 3)
    done(out)
    assert float(out) == 2.0
    assert int(same.run) == int(state.run)  # tap passes the state through unchanged
    assert capsys.readouterr().out == "step=3 | loss=2\n"


def test_logger_tap_under_vmap_one_run_per_lane():
    rec = Recorder()
    states = jax.vmap(rec.init)(jnp.arange(2))
    tapped = jax.vmap(lambda s, x: rec.tap(train_step, s)(x, 1)[0])
    done(tapped(states, jnp.array([1.0, 2.0])))
    assert sorted((w[1], w[2]["loss"]) for w in rec.written) == [(0, [2.0]), (1, [4.0])]


def test_user_subclass_tap_uses_log_on_the_host():
    seen = []

    class Host(Counter):
        def log(self, state, logs):
            seen.append(tolist(dict(logs)))
            return state

    logger = Host()
    out, _ = logger.tap(train_step, logger.init())(jnp.float32(1.0), 0)
    done(out)
    assert seen == [{"loss": [2.0]}]


def test_grad_through_logger_spool_logs_primal_values():
    rec = Recorder()
    state = rec.init()

    def loss(p):
        value = jnp.sum(p**2)
        lox.log({"loss": value}, step=0)
        return value

    grads = done(jax.jit(jax.grad(lambda p: rec.spool(loss, state)(p)[0]))(jnp.ones(3)))
    assert tolist(grads) == [2.0, 2.0, 2.0]
    assert rec.written == [("handle0", 0, {"loss": [3.0]}, {"loss": {"step": [0]}})]


def test_save_logger_flush_every_buffers_until_finish(tmp_path):
    logger = SaveLogger(tmp_path, flush_every=2)
    state = logger.init()
    for step in range(3):
        state = logger.log(state, metrics(float(step), step))
    assert tolist(load(tmp_path / "run_0")["loss"]) == [0.0, 1.0]  # one chunk of two calls
    logger.finish(state)
    assert tolist(load(tmp_path / "run_0").steps["loss"]["step"]) == [0, 1, 2]
    assert len(os.listdir(tmp_path / "run_0" / "chunks")) == 2
    with pytest.raises(ValueError, match=r"flush_every must be a positive int, got 0"):
        SaveLogger(tmp_path, flush_every=0)
    with pytest.raises(TypeError, match=r"SaveLogger: path must be a folder path .* got 3 \(int\)"):
        SaveLogger(3)


def test_flush_writes_what_a_save_logger_holds_back_and_the_run_goes_on(tmp_path):
    logger = MultiLogger(SaveLogger(tmp_path, flush_every=100), ConsoleLogger(print_fn=[].append))
    state = logger.init()
    state = logger.log(state, metrics(0.0, 0))
    assert not (tmp_path / "run_0").exists()  # held back: 1 of 100 calls
    logger.flush(state)  # e.g. at a checkpoint: a crash after it loses nothing logged before
    assert tolist(load(tmp_path / "run_0")["loss"]) == [0.0]
    logger.flush(state)  # nothing held back: nothing written again
    state = logger.log(state, metrics(1.0, 1))
    logger.finish(state)
    assert tolist(load(tmp_path / "run_0").steps["loss"]["step"]) == [0, 1]


def test_state_from_a_sharded_jit_feeds_the_next_call():
    if jax.device_count() < 2:
        pytest.skip("needs several devices (the root conftest fakes 8 CPUs)")
    mesh = jax.make_mesh((jax.device_count(),), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "d"))
    values = jax.device_put(jnp.ones((1, 2 * jax.device_count())), spec)
    rec = Recorder()
    state = rec.init()
    step = jax.jit(lambda s, v: rec.log(rec.log(s, logdict({"v": v})), logdict({"v": 2 * v})))
    for _ in range(2):  # a callback output would come back single-device and be refused here
        state = step(state, values)
    rec.finish(done(state))
    assert [w[2]["v"][0][0] for w in rec.written] == [1.0, 2.0, 1.0, 2.0]
