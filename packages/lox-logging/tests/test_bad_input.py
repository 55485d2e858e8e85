"""The bad-input catalogue of lox: damaged saves and wrong arguments.

Each case asserts the exception type and that the message says what to do. Damaged or altered
save folders raise ``lox.DamagedSaveError`` naming the file, keep the error that revealed the
damage as ``__cause__``, and lox never reads or writes outside the save folder.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

import lox

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")


def a_save(folder, n=2):
    lox.save(lox.logdict({"x": jnp.arange(n, dtype=jnp.float32)}), folder)
    return folder


def index_lines(folder):
    return (folder / "lox-index.jsonl").read_text().splitlines()


def write_index(folder, lines):
    (folder / "lox-index.jsonl").write_text("".join(line + "\n" for line in lines))


def files_under(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
    )


# --- damaged saves: lox.load ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../outside.npz", "../outside.npz", "/tmp/outside.npz"])
def test_index_naming_a_file_outside_the_save_is_refused(tmp_path, name):
    save = a_save(tmp_path / "a" / "b" / "save")
    # A file that would load fine, were lox to follow the index out of the folder.
    outside = {"0_0": np.full(2, 7.0, np.float32)}
    np.savez(tmp_path / "a" / "outside.npz", **outside)
    np.savez(tmp_path / "outside.npz", **outside)
    write_index(save, [line.replace("chunks/00000000.npz", name) for line in index_lines(save)])
    with pytest.raises(lox.DamagedSaveError) as info:
        lox.load(save)
    message = str(info.value)
    assert f"names the chunk file {name!r}, which is not a chunk of this save" in message
    assert "line 3 of" in message and "reads nothing outside its folder" in message
    assert "Restore" in message and "save to a new folder" in message


def test_truncated_chunk(tmp_path):
    save = a_save(tmp_path)
    chunk = tmp_path / "chunks" / "00000000.npz"
    chunk.write_bytes(chunk.read_bytes()[:100])
    with pytest.raises(lox.DamagedSaveError, match=r"chunk file chunks/00000000\.npz") as info:
        lox.load(save)
    assert isinstance(info.value.__cause__, zipfile.BadZipFile)
    assert "truncated or altered" in str(info.value)
    assert f"Put {str(chunk)!r} back from a copy of the save" in str(info.value)


def test_corrupted_index_line(tmp_path):
    save = a_save(tmp_path)
    write_index(save, [*index_lines(save), "garbage{"])
    with pytest.raises(lox.DamagedSaveError, match=r"line 4 of .* is not valid JSON") as info:
        lox.load(save)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)
    assert "got 'garbage{'" in str(info.value) and "Restore" in str(info.value)


def test_deleted_chunk_says_how_to_restore_it_or_read_the_rest(tmp_path):
    save = tmp_path / "save"
    lox.save(lox.logdict({"x": jnp.arange(2.0)}), save)
    lox.save(lox.logdict({"x": jnp.arange(3.0), "y": jnp.ones(3)}), save)
    os.remove(save / "chunks" / "00000001.npz")
    with pytest.raises(lox.DamagedSaveError) as info:
        lox.load(save)
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert str(info.value) == (
        f"lox.load: the chunk file chunks/00000001.npz of the save {str(save)!r} (listed on line 5 "
        "of lox-index.jsonl) is missing. It was deleted or moved after lox wrote it. Put "
        f"{str(save / 'chunks' / '00000001.npz')!r} back from a copy of the save if you have one. "
        "To read the other events without it (it holds 3 events of 'x', 3 of 'y'), copy the "
        "folder, delete line 5 from the copy's lox-index.jsonl and lox.load the copy. To keep "
        "logging, save to a new folder."
    )
    # The way out it offers works: the copy without that line loads every other event.
    copy = tmp_path / "copy"
    shutil.copytree(save, copy)
    lines = index_lines(copy)
    write_index(copy, lines[:4] + lines[5:])
    logs = lox.load(copy)
    assert logs["x"].tolist() == [0.0, 1.0] and logs["y"].shape == (0,)


def test_deleted_chunks_folder(tmp_path):
    save = a_save(tmp_path)
    shutil.rmtree(tmp_path / "chunks")
    with pytest.raises(lox.DamagedSaveError, match=r"is missing.*Put .* back from a copy"):
        lox.load(save)


def test_chunk_from_another_save(tmp_path):
    save, other = a_save(tmp_path / "s", n=2), a_save(tmp_path / "o", n=5)
    shutil.copy(other / "chunks" / "00000000.npz", save / "chunks" / "00000000.npz")
    with pytest.raises(lox.DamagedSaveError, match=r"has shape \(5,\), but the index lists 2"):
        lox.load(save)


def test_chunk_that_is_not_an_archive(tmp_path):
    save = a_save(tmp_path)
    with open(tmp_path / "chunks" / "00000000.npz", "wb") as fh:
        np.save(fh, np.zeros(2))  # one .npy, not an .npz
    with pytest.raises(lox.DamagedSaveError, match=r"not an npz archive.*truncated or altered"):
        lox.load(save)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[1, 2]", r"is \[1, 2\], expected a JSON object"),
        ('{"key": "y", "id": 1}', r"holds a malformed key entry"),
        ('{"chunk": 1, "file": "chunks/00000001.npz", "counts": {"9": 1}}', r"event counts"),
    ],
)
def test_index_line_lox_did_not_write(tmp_path, line, problem):
    save = a_save(tmp_path)
    write_index(save, [*index_lines(save), line])
    with pytest.raises(lox.DamagedSaveError, match=problem + r".*altered after lox wrote it"):
        lox.load(save)


def test_empty_index(tmp_path):
    (tmp_path / "lox-index.jsonl").write_text("")
    with pytest.raises(lox.DamagedSaveError, match=r"holds no complete line.*Delete"):
        lox.load(tmp_path)


def test_appending_to_a_damaged_save_is_refused(tmp_path):
    save = a_save(tmp_path)
    write_index(save, [*index_lines(save), "garbage{"])
    before = (save / "lox-index.jsonl").read_bytes()
    with pytest.raises(lox.DamagedSaveError, match=r"^lox\.save: line 4 .* not valid JSON"):
        lox.save(lox.logdict({"x": jnp.zeros(1)}), save)
    assert (save / "lox-index.jsonl").read_bytes() == before


# --- links: lox reads and writes only inside its folder --------------------------------------


@needs_symlinks
def test_load_through_a_chunks_link_is_refused(tmp_path):
    a_save(tmp_path / "elsewhere")
    save = a_save(tmp_path / "save")
    shutil.rmtree(save / "chunks")
    os.symlink(tmp_path / "elsewhere" / "chunks", save / "chunks")
    with pytest.raises(lox.DamagedSaveError, match=r"chunks in the save folder .* symbolic link"):
        lox.load(save)


@needs_symlinks
def test_save_into_a_chunks_link_writes_nothing_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    save = tmp_path / "save"
    save.mkdir()
    os.symlink(outside, save / "chunks")
    with pytest.raises(
        lox.DamagedSaveError, match=r"chunks .* is a symbolic link .*Remove the link"
    ):
        lox.save(lox.logdict({"x": jnp.zeros(1)}), save)
    assert os.listdir(outside) == []


@needs_symlinks
def test_save_through_an_index_link_leaves_its_target_alone(tmp_path):
    save = a_save(tmp_path / "save")
    victim = tmp_path / "victim.jsonl"
    shutil.move(save / "lox-index.jsonl", victim)
    before = victim.read_bytes()
    os.symlink(victim, save / "lox-index.jsonl")
    with pytest.raises(lox.DamagedSaveError, match=r"lox-index\.jsonl in the save folder .* link"):
        lox.save(lox.logdict({"x": jnp.zeros(1)}), save)
    assert victim.read_bytes() == before
    with pytest.raises(lox.DamagedSaveError, match=r"lox-index\.jsonl .* symbolic link"):
        lox.load(save)


@needs_symlinks
def test_save_through_a_temporary_chunk_link_leaves_its_target_alone(tmp_path):
    save = a_save(tmp_path / "save")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    os.symlink(victim, save / "chunks" / "00000001.npz.tmp")
    with pytest.raises(lox.DamagedSaveError, match=r"00000001\.npz\.tmp .* symbolic link"):
        lox.save(lox.logdict({"x": jnp.zeros(1)}), save)
    assert victim.read_text() == "mine"


@needs_symlinks
def test_save_logger_refuses_linked_run_and_chunks_folders(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    logs = lox.logdict({"x": jnp.zeros(1)})
    (tmp_path / "logs").mkdir()
    os.symlink(outside, tmp_path / "logs" / "run_0")
    logger = lox.SaveLogger(tmp_path / "logs")
    with pytest.raises(
        lox.DamagedSaveError, match=r"^SaveLogger: run_0 in the save folder .* link"
    ):
        logger.log(logger.init(), logs)
    (tmp_path / "logs2" / "run_0").mkdir(parents=True)
    os.symlink(outside, tmp_path / "logs2" / "run_0" / "chunks")
    logger = lox.SaveLogger(tmp_path / "logs2")
    with pytest.raises(lox.DamagedSaveError, match=r"^lox\.save: chunks .* symbolic link"):
        logger.log(logger.init(), logs)
    assert files_under(outside) == []


# --- wrong arguments --------------------------------------------------------------------------


def _logs():
    return lox.logdict({"x": jnp.zeros(2)})


BAD_ARGUMENTS = {
    "log a string value": (
        lambda tmp: lox.log({"x": "text"}),
        TypeError,
        r"holds a str .* handle them on the host, e.g. in a lox.tap callback",
    ),
    "log a bare value": (
        lambda tmp: lox.log(jnp.zeros(1)),
        TypeError,
        r"expects a mapping .* Wrap the value in a dict: lox.log\(\{\"loss\": loss\}\)",
    ),
    "log a float step": (
        lambda tmp: lox.log({"x": 1.0}, step=1.5),
        TypeError,
        r"step=1.5 must be a scalar integer.*log float values as data instead",
    ),
    "spool a non-callable": (
        lambda tmp: lox.spool(jnp.zeros(1)),
        TypeError,
        r"lox.spool: f must be callable.*not lox.spool\(step_fn\(...\)\)",
    ),
    "tap with a non-callable callback": (
        lambda tmp: lox.tap(lambda x: x, callback="print"),
        TypeError,
        r"lox.tap: callback must be callable.*Pass the function itself",
    ),
    "spool names of a wrong type": (
        lambda tmp: lox.spool(lambda x: x, names=3),
        TypeError,
        r"names must be None \(all sites\), a string or a sequence of strings, got 3",
    ),
    "logdict from a list": (
        lambda tmp: lox.logdict([("x", jnp.zeros(1))]),
        TypeError,
        r"logdict: data must be a mapping .* got list.*Example: lox.logdict\(",
    ),
    "logdict without an event axis": (
        lambda tmp: lox.logdict({"x": 1.0}),
        ValueError,
        r"needs a leading event axis.*Add one with `x\[None\]`",
    ),
    "logdict missing key": (
        lambda tmp: _logs()["y"],
        KeyError,
        r"logdict has no key 'y'. Keys: 'x'",
    ),
    "logdict slice by a string": (
        lambda tmp: _logs().slice["x"],
        TypeError,
        r"indexes the event axis only, got 'x'.*logs.slice\[-1\]",
    ),
    "logdict filter with a non-callable": (
        lambda tmp: _logs().filter("x"),
        TypeError,
        r"expected a predicate pred\(key, value\) -> bool, got 'x'.*Example: logs.filter",
    ),
    "logdict plus a dict": (
        lambda tmp: _logs() + {"x": jnp.zeros(1)},
        TypeError,
        r"logdict \+ dict: both sides must be logdicts. Wrap the mapping first",
    ),
    "logdict reduce mode typo": (
        lambda tmp: _logs().reduce("meen"),
        ValueError,
        r"unknown mode 'meen'.*Did you mean 'mean'",
    ),
    "save a plain dict": (
        lambda tmp: lox.save({"x": np.zeros(1)}, tmp),
        TypeError,
        r"expected a logdict, got dict. Wrap plain dicts: lox.save\(lox.logdict",
    ),
    "save to a non-path": (
        lambda tmp: lox.save(_logs(), 3),
        TypeError,
        r"lox.save: path must be a folder path .* got 3 \(int\). Pass the folder's name",
    ),
    "load a non-path": (
        lambda tmp: lox.load(None),
        TypeError,
        r"lox.load: path must be a folder path .* got None \(NoneType\). Pass the folder's name",
    ),
    "load a file": (
        lambda tmp: lox.load(__file__),
        FileNotFoundError,
        r"is a file; expected the folder lox.save \(or SaveLogger\) wrote.*Pass that folder",
    ),
    "load a missing folder": (
        lambda tmp: lox.load(tmp / "nope"),
        FileNotFoundError,
        r"does not exist; expected a folder written by lox.save",
    ),
    "save to an empty path": (
        lambda tmp: lox.save(_logs(), ""),
        ValueError,
        r"^lox.save: path is '' \(an empty string\); expected the folder of the logs. Pass the "
        r"folder's name, e.g. 'runs/logs', or '.' if you mean the working directory.$",
    ),
    "load an empty path": (
        lambda tmp: lox.load(""),
        ValueError,
        r"^lox.load: path is '' \(an empty string\); expected the folder of the logs",
    ),
    "to_csv of an empty path": (
        lambda tmp: lox.to_csv("", tmp / "a.csv"),
        ValueError,
        r"^lox.load: path is '' \(an empty string\)",
    ),
    "SaveLogger of an empty path": (
        lambda tmp: lox.SaveLogger(""),
        ValueError,
        r"^SaveLogger: path is '' \(an empty string\).*e.g. SaveLogger\('runs/logs'\), or '.'",
    ),
    "to_csv into an empty file name": (
        lambda tmp: lox.to_csv(_logs(), ""),
        ValueError,
        r"^lox.to_csv: file is '' \(an empty string\); pass the path of the CSV file to write, "
        r"e.g. 'metrics.csv'.$",
    ),
    "to_csv of a non-path": (
        lambda tmp: lox.to_csv(3, tmp / "a.csv"),
        TypeError,
        r"logs must be a lox.logdict or the folder of a save, got 3.*Pass lox.spool's logs",
    ),
    "SaveLogger flush_every 0": (
        lambda tmp: lox.SaveLogger(tmp, flush_every=0),
        ValueError,
        r"flush_every must be a positive int, got 0. Use 1",
    ),
    "logger.log of a dict": (
        lambda tmp: lox.ConsoleLogger().log(lox.ConsoleLogger().init(), {"x": 1.0}),
        TypeError,
        r"expected a lox.logdict, got dict.*build one: lox.logdict",
    ),
    "MultiLogger of a non-logger": (
        lambda tmp: lox.MultiLogger(print),
        TypeError,
        r"argument 0 is builtin_function_or_method, expected a lox.Logger",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_argument(tmp_path, case):
    call, error, message = BAD_ARGUMENTS[case]
    with pytest.raises(error, match=message):
        call(tmp_path)
