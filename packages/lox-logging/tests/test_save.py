"""save/load: round trips, appending in O(new data), safe key names, errors."""

from __future__ import annotations

import collections
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import pytree_dataclass
from lox import load, logdict, save


def tolist(tree):
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def files_under(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
    )


def test_round_trip_data_steps_and_dtypes(tmp_path):
    logs = logdict(
        {
            "f32": jnp.array([0.5, 1.5]),
            "bf16": jnp.array([[1.0, 2.0]], jnp.bfloat16),
            "i8": np.array([1, -2, 3], np.int8),
            "flag": np.array([True, False]),
        },
        {"f32": {"step": jnp.array([3, 4]), "epoch": jnp.array([0, 0])}},
    )
    save(logs, tmp_path / "run")
    back = load(tmp_path / "run")
    assert list(back) == list(logs)
    for key in logs:
        assert back[key].dtype == logs[key].dtype, key
        np.testing.assert_array_equal(np.asarray(back[key]), np.asarray(logs[key]))
    assert tolist(back.steps) == {
        "bf16": {},
        "f32": {"epoch": [0, 0], "step": [3, 4]},
        "flag": {},
        "i8": {},
    }
    assert back.steps["f32"]["step"].dtype == np.int32


Pair = collections.namedtuple("Pair", ["lo", "hi"])


@pytree_dataclass
class Custom:
    w: jax.Array
    b: jax.Array


def test_pytree_values_stay_pytrees(tmp_path):
    value = {
        "d": {"b": jnp.zeros(1), "a": jnp.ones((1, 2))},
        "l": [jnp.zeros(1), None, (jnp.ones(1),)],
        "n": Pair(jnp.zeros(1), jnp.ones(1)),
    }
    save(logdict({"p": value, "c": Custom(w=jnp.ones((1, 3)), b=jnp.zeros(1))}), tmp_path)
    back = load(tmp_path)
    p = back["p"]
    assert sorted(p["d"]) == ["a", "b"]
    assert tolist(p["d"]["a"]) == [[1.0, 1.0]]
    assert isinstance(p["l"], list)
    assert p["l"][1] is None
    assert isinstance(p["l"][2], tuple)
    assert type(p["n"]).__name__ == "Pair"
    assert p["n"]._fields == ("lo", "hi")
    assert tolist(p["n"].hi) == [1.0]
    # Custom nodes come back as dicts keyed by their child names: nothing is imported on load.
    assert tolist(back["c"]) == {"w": [[1.0, 1.0, 1.0]], "b": [0.0]}


def test_append_concatenates_and_never_rewrites_old_chunks(tmp_path):
    step = lambda i: logdict({"x": jnp.array([float(i)])}, {"x": {"step": jnp.array([i])}})
    save(step(0), tmp_path)
    first = {f: (tmp_path / f).read_bytes() for f in files_under(tmp_path) if "chunks" in f}
    index_before = (tmp_path / "lox-index.jsonl").read_bytes()
    save(step(1) + step(2), tmp_path)
    # Old chunk files are untouched and the index only grew at its end.
    assert {f: (tmp_path / f).read_bytes() for f in first} == first
    assert (tmp_path / "lox-index.jsonl").read_bytes().startswith(index_before)
    assert len([f for f in files_under(tmp_path) if "chunks" in f]) == 2
    back = load(tmp_path)
    assert tolist(back["x"]) == [0.0, 1.0, 2.0]
    assert tolist(back.steps["x"]["step"]) == [0, 1, 2]


def test_append_new_keys_and_reread_index(tmp_path):
    save(logdict({"a": jnp.zeros(1)}), tmp_path / "first")
    # A save this process never wrote (as if another process had): its index is read from disk.
    target = shutil.copytree(tmp_path / "first", tmp_path / "copy")
    save(logdict({"b": jnp.ones(2), "a": jnp.ones(1)}), target)
    save(logdict({"a": jnp.full(1, 2.0)}), os.path.join(target, "."))  # another spelling
    back = load(target)
    assert tolist(back["a"]) == [0.0, 1.0, 2.0]
    assert tolist(back["b"]) == [1.0, 1.0]


def test_zero_events_round_trip_with_dtype(tmp_path):
    logs = logdict({"e": jnp.zeros((0, 3), jnp.int16)}, {"e": {"step": jnp.zeros(0, jnp.int32)}})
    save(logs, tmp_path)
    back = load(tmp_path)
    assert back["e"].shape == (0, 3)
    assert back["e"].dtype == np.int16
    assert back.steps["e"]["step"].shape == (0,)
    save(logdict({"e": jnp.ones((2, 3), jnp.int16)}, {"e": {"step": jnp.arange(2)}}), tmp_path)
    assert load(tmp_path)["e"].shape == (2, 3)


UNSAFE = ["../x", "/abs", "a/b", "", "ünïcødé ✓", ".", "..", "..\\win", "nul", "x" * 300]


def test_any_key_is_safe_and_nothing_is_written_outside(tmp_path):
    target = tmp_path / "inside" / "save"
    logs = logdict({k: jnp.array([float(i)]) for i, k in enumerate(UNSAFE)})
    save(logs, target)
    save(logs, target)
    assert sorted(os.listdir(tmp_path)) == ["inside"]
    assert os.listdir(tmp_path / "inside") == ["save"]
    assert all(f == "lox-index.jsonl" or f.startswith("chunks/") for f in files_under(target))
    back = load(target)
    assert sorted(back) == sorted(UNSAFE)
    for i, k in enumerate(UNSAFE):
        assert tolist(back[k]) == [float(i), float(i)]


def test_no_pickle_in_chunks(tmp_path):
    save(logdict({"x": jnp.zeros(2)}), tmp_path)
    (chunk,) = (tmp_path / "chunks").iterdir()
    with np.load(chunk, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["0_0"]


def test_interrupted_append_is_ignored_then_repaired(tmp_path):
    save(logdict({"x": jnp.array([1.0])}), tmp_path)
    with open(tmp_path / "lox-index.jsonl", "ab") as fh:
        fh.write(b'{"chunk": 1, "file": "chunks/000')  # a crash mid-line
    assert tolist(load(tmp_path)["x"]) == [1.0]
    save(logdict({"x": jnp.array([2.0])}), tmp_path)
    assert tolist(load(tmp_path)["x"]) == [1.0, 2.0]


def test_append_signature_mismatch(tmp_path):
    save(logdict({"x": jnp.zeros((1, 2))}), tmp_path)
    with pytest.raises(ValueError, match=r"key 'x' was saved to .* as float32\[2\] per event, now"):
        save(logdict({"x": jnp.zeros((1, 3))}), tmp_path)
    with pytest.raises(ValueError, match=r"given int32\[2\]\. One key keeps one structure"):
        save(logdict({"x": jnp.zeros((1, 2), jnp.int32)}), tmp_path)
    with pytest.raises(ValueError, match=r"key 'x' was saved .* with steps \[\], now given steps"):
        save(logdict({"x": jnp.zeros((1, 2))}, {"x": {"step": jnp.arange(1)}}), tmp_path)
    assert load(tmp_path)["x"].shape == (1, 2)  # refused saves wrote nothing


def test_save_errors(tmp_path):
    with pytest.raises(TypeError, match=r"lox.save: expected a logdict, got dict.*lox.logdict"):
        save({"x": np.zeros(1)}, tmp_path)
    with pytest.raises(TypeError, match=r"key 'o' holds an object array.*pickle is never used"):
        save(logdict({"o": np.array([None], dtype=object)}), tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError, match=r"is a file; expected a folder"):
        save(logdict(), tmp_path / "file")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist; expected a folder written by"):
        load(tmp_path / "missing")
    save(logdict({"x": jnp.zeros(1)}), tmp_path / "runs" / "run_0")
    with pytest.raises(FileNotFoundError, match=r"is not a lox save.*holds the saves \['run_0'\]"):
        load(tmp_path / "runs")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "lox-index.jsonl").write_text('{"format": "csv"}\n')
    with pytest.raises(ValueError, match=r"is not a lox save index"):
        load(tmp_path / "other")
    header = json.dumps({"format": "lox-logdict", "version": 99})
    (tmp_path / "other" / "lox-index.jsonl").write_text(header + "\n")
    with pytest.raises(ValueError, match=r"newer lox \(format version 99.*Upgrade lox-logging"):
        load(tmp_path / "other")


def test_save_inside_jit_is_refused_with_a_hint(tmp_path):
    def traced(logs):
        save(logs, tmp_path)
        return logs

    with pytest.raises(TypeError, match=r"key 'x' holds a traced value .*lox.SaveLogger"):
        jax.jit(traced)(logdict({"x": jnp.zeros(1)}))
