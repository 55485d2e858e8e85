"""The documents of ``gpt prepare``'s inputs, read as a stream: one per text file, ``.jsonl`` line
or
``.parquet`` row, from plain, ``.gz`` (stdlib) or ``.zst`` (``zstandard``, an extra) files.

Each input file has a name relative to the root it was found under (a folder given on the command
line, or the folder of a file given by itself); a document is known by ``(name, position)``, which
is what the train/validation split hashes, so adding files never moves an existing document.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Any

from .._errors import DataError
from .examples import check_example, kind_of, mixed_kinds, unknown_message_keys

TEXT_SUFFIXES = (".txt", ".md")
SUFFIXES = (*TEXT_SUFFIXES, ".jsonl", ".parquet")
COMPRESSIONS = (".gz", ".zst")


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One input file: where it is, its name in the manifest, and its size."""

    path: Path
    name: str
    size: int

    @property
    def kind(self) -> str:
        """``"text"``, ``"jsonl"`` or ``"parquet"`` (the compression suffix stripped)."""
        suffix = _inner_suffix(self.path)
        return "text" if suffix in TEXT_SUFFIXES else suffix[1:]


@dataclasses.dataclass(frozen=True)
class Document:
    """A document's text, its position in its file, and how many undecodable bytes were replaced;
    for a chat or completion line (``examples.py``) also the example (its messages, or ``(prompt,
    completion)``), and as ``text`` its contents joined (what a BPE tokenizer trains on), and the
    message keys it leaves out (``ignored``)."""

    pos: int
    text: str
    n_replaced: int
    example: Any = None
    ignored: tuple[str, ...] = ()  # a chat line's message keys other than role, content, weight


@dataclasses.dataclass(frozen=True)
class Expect:
    """The kind every line must have (``examples.KINDS``), and where the line that set it is."""

    kind: str = "text"
    where: str = ""


PLAIN_TEXT = Expect()


def detect_kind(sources: Sequence[SourceFile]) -> Expect:
    """The kind of the inputs: that of the first line of the first file (text and parquet files
    are plain text). A first line that is not JSON reads as text, and its reader names it."""
    first = sources[0]
    if first.kind != "jsonl":
        return Expect("text", str(first.path))
    try:
        with _open_binary(first.path) as raw:
            for pos, line in enumerate(raw):
                if line.strip():
                    where = f"{first.path}:{pos + 1}"
                    return Expect(kind_of(json.loads(line.decode("utf-8", "replace"))), where)
    except (json.JSONDecodeError, OSError, EOFError, zlib.error):
        pass  # the reader says what is wrong with the file, by line
    return Expect("text", str(first.path))


def _inner_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _readable(path: Path) -> bool:
    return _inner_suffix(path) in SUFFIXES and not path.name.startswith(".")


@dataclasses.dataclass(frozen=True)
class Found:
    """What the inputs hold: the files to read, and the names of the files of the folders given
    that are not read (a kind gpt prepare does not read; hidden files are left out of both)."""

    files: list[SourceFile]
    skipped: list[str]


def skipped_note(names: Sequence[str], shown: int = 5) -> str:
    """``skipped 5 files (.py): in/a.py, ...``: the names grouped by extension ("" for none).

    Example:
        >>> skipped_note(["d/a.py", "d/b.py", "d/c.csv"], shown=2)
        'skipped 3 files (1 .csv, 2 .py): d/a.py, d/b.py and 1 more'
    """
    if not names:
        return ""
    counts: dict[str, int] = {}
    for name in names:
        ext = PurePosixPath(name).suffix.lower() or "no extension"
        counts[ext] = counts.get(ext, 0) + 1
    kinds = ", ".join(f"{n} {ext}" if len(counts) > 1 else ext for ext, n in sorted(counts.items()))
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    plural = "s" if len(names) != 1 else ""
    return f"skipped {len(names)} file{plural} ({kinds}): {', '.join(names[:shown])}{more}"


def find_sources(inputs: Sequence[str | Path]) -> Found:
    """The input files of ``inputs`` (files and folders, searched recursively), in a fixed order,
    and the names of the files in those folders that are not read.

    Raises:
        DataError: an input that does not exist or is not a regular file, a file of an unknown
            kind, a folder with no readable file, or two inputs that give the same name.
    """
    found: dict[str, SourceFile] = {}
    skipped: list[str] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            pairs, other = _folder_files(path)
            skipped += other
        elif path.is_file():
            if not _readable(path):
                raise DataError(
                    f"Input {path} is not a kind of file gpt prepare reads. Expected "
                    f"{', '.join(SUFFIXES)}, optionally compressed as .gz or .zst; rename it (a "
                    "plain text file as .txt) or leave it out."
                )
            pairs = [(path, path.name)]
        elif path.exists():
            raise DataError(
                f"Input {path} is not a regular file or a folder (a named pipe, a device or a "
                "socket), and gpt prepare reads files. Save the stream to a file and give that."
            )
        else:
            raise DataError(
                f"Input {path} does not exist. Give text files (.txt, .md), .jsonl or .parquet "
                "files (optionally .gz/.zst), or folders holding them."
            )
        for file, name in pairs:
            if name in found and found[name].path.resolve() != file.resolve():
                raise DataError(
                    f"Inputs {found[name].path} and {file} are both named {name!r} in the store "
                    "(names are relative to the folder given). Rename one or give their parent "
                    "folders instead."
                )
            found[name] = SourceFile(file, name, file.stat().st_size)
    return Found(sorted(found.values(), key=lambda s: s.name), sorted(set(skipped)))


def _folder_files(folder: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """(file, name) of each readable file below ``folder``, and the names of its other files."""
    named = [
        (p, f"{folder.name}/{p.relative_to(folder).as_posix()}")
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    pairs = [(f, name) for f, name in named if _readable(f)]
    other = [name for f, name in named if not _readable(f)]
    if not pairs:
        seen = f" ({skipped_note(other)})" if other else ""
        raise DataError(
            f"Input folder {folder} holds no file gpt prepare reads{seen}. Expected files named "
            f"*{', *'.join(SUFFIXES)} (optionally ending in .gz or .zst); hidden files are "
            "skipped. Rename plain text files to .txt to include them."
        )
    return pairs, other


def check_extras(files: Sequence[SourceFile]) -> None:
    """Every optional package the inputs need is installed: checked before any work, not hours in
    when the first such file is reached.

    Raises:
        DataError: a missing extra, naming it and the file that needs it.
    """
    for f in files:
        if f.path.suffix.lower() == ".zst":
            _extra("zstandard", "zstd", f.path)
        if f.kind == "parquet":
            _extra("pyarrow.parquet", "parquet", f.path)


def read_documents(
    source: SourceFile, *, text_field: str, skip: int = 0, expect: Expect = PLAIN_TEXT
) -> Iterator[Document]:
    """The documents of ``source`` from position ``skip`` on, each of the kind ``expect`` says.

    Raises:
        DataError: a ``.jsonl`` line that is not JSON or has no string ``text_field``, a line of
            another kind than ``expect``, a malformed chat or completion line, a parquet
            file without the column, a file that is cut short or damaged (a truncated ``.gz``,
            bytes that are not Parquet), or a missing optional extra; each names the file.
    """
    read = 0  # documents yielded, for a message about a file that ends early
    try:
        documents = (
            _parquet(source, text_field, skip, expect)
            if source.kind == "parquet"
            else (_lines_or_text(source, text_field, skip, expect))
        )
        for doc in documents:
            read += 1
            yield doc
    except DataError:
        raise  # already names the file and line (a DataError is a ValueError too)
    except Exception as err:
        if not _damaged(err):
            raise
        raise DataError(_unreadable(source, err, skip + read)) from err


def _damaged(err: Exception) -> bool:
    """Whether ``err`` is what a cut-short or damaged file raises while it is read: gzip
    (EOFError; BadGzipFile, an OSError; zlib.error), zstandard (ZstdError) or pyarrow (its
    ArrowException base: ArrowInvalid for bytes that are not Parquet). The optional extras'
    classes are told by name, so that neither has to be installed to read the others."""
    names = {cls.__name__ for cls in type(err).__mro__}
    return isinstance(err, EOFError | OSError | zlib.error) or bool(
        names & {"ZstdError", "ArrowException"}
    )


def _unreadable(source: SourceFile, err: Exception, documents: int) -> str:
    what = "ends early: it was cut short" if isinstance(err, EOFError) else "is damaged"
    after = f"after {documents:,} documents; " if documents else ""
    return (
        f"{source.path} {what} ({after}{type(err).__name__}: {str(err)[:200]}). It may be an "
        "interrupted download or copy, or not the kind of file its name says; fetch it again, or "
        "leave it out of the inputs."
    )


def _lines_or_text(
    source: SourceFile, text_field: str, skip: int, expect: Expect
) -> Iterator[Document]:
    with _open_binary(source.path) as raw:
        if source.kind == "text":
            if expect.kind != "text":
                raise mixed_kinds(str(source.path), "text", expect.kind, expect.where)
            if skip == 0:
                yield _decode(raw.read(), 0)
            return
        for pos, line in enumerate(raw):
            if pos < skip or not line.strip():
                continue
            yield _json_doc(source, pos, line, text_field, expect)


def _decode(data: bytes, pos: int) -> Document:
    try:
        return Document(pos, data.decode("utf-8"), 0)
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        # U+FFFD already in the text is counted too: an upper bound, exact for ordinary text.
        return Document(pos, text, text.count("\ufffd"))


def _json_doc(source: SourceFile, pos: int, line: bytes, field: str, expect: Expect) -> Document:
    doc = _decode(line, pos)
    where = f"{source.path}:{pos + 1}"
    try:
        record: Any = json.loads(doc.text)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{where} is not JSON ({err.msg} at column {err.colno}). Each line of a .jsonl file "
            f'must be one JSON object, e.g. {{"{field}": "..."}}; fix or remove the line.'
        ) from err
    kind = kind_of(record)
    if kind != expect.kind:
        raise mixed_kinds(where, kind, expect.kind, expect.where)
    if kind != "text":
        example = check_example(record, kind, where)
        if kind == "completion":
            return Document(pos, "\n".join(example), doc.n_replaced, example)
        if kind == "preference":  # the text a BPE tokenizer trains on: every string of the pair
            texts = (
                example[1:]
                if example[0] == "text"
                else [m["content"] for ms in example[1:] for m in ms]
            )
            return Document(pos, "\n".join(texts), doc.n_replaced, example)
        contents = "\n".join(m["content"] for m in example)
        ignored = tuple(unknown_message_keys(record))
        return Document(pos, contents, doc.n_replaced, example, ignored)
    text = record.get(field) if isinstance(record, dict) else None
    if not isinstance(text, str):
        keys = sorted(record) if isinstance(record, dict) else []
        raise DataError(
            f"{where} has no string field {field!r} (keys: {keys or 'none'}). Name the field that "
            f"holds the text with --text-field, e.g. --text-field {keys[0] if keys else 'text'}."
        )
    return Document(pos, text, doc.n_replaced)


def _open_binary(path: Path) -> IO[bytes]:
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if suffix == ".zst":
        zstandard = _extra("zstandard", "zstd", path)
        raw = path.open("rb")
        stream: io.RawIOBase = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.BufferedReader(stream)
    return path.open("rb")


def _extra(module: str, extra: str, path: Path) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise DataError(
            f"Reading {path} needs the {module} package, which is not installed. Install the "
            f"extra: pip install 'gpt-models[{extra}]'."
        ) from err


def _parquet(source: SourceFile, field: str, skip: int, expect: Expect) -> Iterator[Document]:
    if expect.kind != "text":
        raise mixed_kinds(str(source.path), "text", expect.kind, expect.where)
    pq = _extra("pyarrow.parquet", "parquet", source.path)
    if source.path.suffix.lower() in COMPRESSIONS:
        with _open_binary(source.path) as raw:
            table_file: Any = pq.ParquetFile(io.BytesIO(raw.read()))
    else:
        table_file = pq.ParquetFile(source.path)
    names = table_file.schema_arrow.names
    if field not in names:
        raise DataError(
            f"{source.path} has no column {field!r} (columns: {names}). Name the text column "
            f"with --text-field, e.g. --text-field {names[0] if names else 'text'}."
        )
    pos = 0
    for batch in table_file.iter_batches(batch_size=1024, columns=[field]):
        for value in batch.column(0).to_pylist():
            if pos >= skip and value is not None:
                if not isinstance(value, str):
                    raise DataError(
                        f"{source.path} row {pos + 1}: column {field!r} holds "
                        f"{type(value).__name__}, expected text. Name a text column with "
                        "--text-field."
                    )
                yield Document(pos, value, 0)
            pos += 1
