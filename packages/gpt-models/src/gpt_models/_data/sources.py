"""The documents of ``gpt prepare``'s inputs, read as a stream: one per text file, ``.jsonl`` line or
``.parquet`` row, from plain, ``.gz`` (stdlib) or ``.zst`` (``zstandard``, an extra) files.

Each input file has a name relative to the root it was found under (a folder given on the command
line, or the folder of a file given by itself); a document is known by ``(name, position)``, which
is what the train/validation split hashes, so adding files never moves an existing document.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .._errors import DataError

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
    """A document's text, its position in its file, and how many undecodable bytes were replaced."""

    pos: int
    text: str
    n_replaced: int


def _inner_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _readable(path: Path) -> bool:
    return _inner_suffix(path) in SUFFIXES and not path.name.startswith(".")


def find_sources(inputs: Sequence[str | Path]) -> list[SourceFile]:
    """The input files of ``inputs`` (files and folders, searched recursively), in a fixed order.

    Raises:
        DataError: an input that does not exist, a file of an unknown kind, a folder with no
            readable file, or two inputs that give the same name.
    """
    found: dict[str, SourceFile] = {}
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and _readable(p)
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not files:
                raise DataError(
                    f"Input folder {path} holds no file gpt prepare reads. Expected files named "
                    f"*{', *'.join(SUFFIXES)} (optionally ending in .gz or .zst); hidden files are "
                    "skipped."
                )
            pairs = [(f, f"{path.name}/{f.relative_to(path).as_posix()}") for f in files]
        elif path.is_file():
            if not _readable(path):
                raise DataError(
                    f"Input {path} is not a kind of file gpt prepare reads. Expected "
                    f"{', '.join(SUFFIXES)}, optionally compressed as .gz or .zst; rename it (a "
                    "plain text file as .txt) or leave it out."
                )
            pairs = [(path, path.name)]
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
    return sorted(found.values(), key=lambda s: s.name)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 8 MiB pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while piece := f.read(1 << 23):
            digest.update(piece)
    return digest.hexdigest()


def read_documents(source: SourceFile, *, text_field: str, skip: int = 0) -> Iterator[Document]:
    """The documents of ``source`` from position ``skip`` on.

    Raises:
        DataError: a ``.jsonl`` line that is not JSON or has no string ``text_field``, a parquet
            file without the column, or a missing optional extra.
    """
    if source.kind == "parquet":
        yield from _parquet(source, text_field, skip)
        return
    with _open_binary(source.path) as raw:
        if source.kind == "text":
            if skip == 0:
                yield _decode(raw.read(), 0)
            return
        for pos, line in enumerate(raw):
            if pos < skip or not line.strip():
                continue
            yield _json_doc(source, pos, line, text_field)


def _decode(data: bytes, pos: int) -> Document:
    try:
        return Document(pos, data.decode("utf-8"), 0)
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        # U+FFFD already in the text is counted too: an upper bound, exact for ordinary text.
        return Document(pos, text, text.count("\ufffd"))


def _json_doc(source: SourceFile, pos: int, line: bytes, field: str) -> Document:
    doc = _decode(line, pos)
    where = f"{source.path}:{pos + 1}"
    try:
        record: Any = json.loads(doc.text)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{where} is not JSON ({err.msg} at column {err.colno}). Each line of a .jsonl file "
            f'must be one JSON object, e.g. {{"{field}": "..."}}; fix or remove the line.'
        ) from err
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
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))  # type: ignore[no-any-return]
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


def _parquet(source: SourceFile, field: str, skip: int) -> Iterator[Document]:
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
