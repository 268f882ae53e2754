"""The archive's storage: Parquet files under ROLLMUX_ARCHIVE_URI through `pyarrow.fs`.

As checkpoints (`ROLLMUX_CHECKPOINT_URI`): a plain path or `file://` URI is a directory,
`s3://bucket/prefix`, `gs://...` or `hdfs://...` object storage with the credentials pyarrow
reads from the environment. Files are partitioned by month (`<table>/month=YYYY-MM/`), and a
batch's file name is fixed by the ids it holds, so a batch run again overwrites its own file
instead of adding a second copy. A file is written to a temporary name and moved into place:
a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any


def filesystem(uri: str) -> tuple[Any, str]:
    """Return (pyarrow filesystem, base path) of a URI or a local path."""
    from pyarrow import fs

    if "://" in uri:
        filesystem_, base = fs.FileSystem.from_uri(uri)
    else:
        filesystem_, base = fs.LocalFileSystem(), os.path.abspath(uri)
    return filesystem_, base.rstrip("/")


def display_uri(uri: str, path: str) -> str:
    """Return the URI of a file written under `uri` (a local path as file://)."""
    if "://" not in uri:
        return f"file://{path}"
    scheme = uri.split("://", 1)[0]
    return path if "://" in path else f"{scheme}://{path.lstrip('/')}"


class ArchiveFile:
    """An archive file open for reading, as a Python file object: pyarrow's own cannot be
    given attributes (a WSGI server's file wrapper sets `close` on what it streams)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def read(self, size: int | None = -1) -> bytes:
        data = self._native.read() if size is None or size < 0 else self._native.read(size)
        return bytes(data)

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._native.seek(offset, whence))

    def tell(self) -> int:
        return int(self._native.tell())

    def close(self) -> None:
        self._native.close()


def open_file(uri: str) -> tuple[ArchiveFile, str]:
    """Open an archive file by the URI `write_table` returned, for reading: (the file, its
    name). Raises FileNotFoundError when it is no longer there."""
    fs_, path = filesystem(uri)
    return ArchiveFile(fs_.open_input_file(path)), path.rsplit("/", 1)[-1]


def batch_name(ids: list[int]) -> str:
    """The file name of a batch: fixed by its ids (a re-run overwrites its own file)."""
    digest = hashlib.sha256(",".join(map(str, sorted(ids))).encode()).hexdigest()[:12]
    return f"jobs-{min(ids)}-{max(ids)}-{digest}.parquet"


def write_table(uri: str, table: str, month: str, name: str, rows: list[dict[str, Any]]) -> str:
    """Write rows as one Parquet file `<table>/month=<month>/<name>`; return its URI.

    Raises whatever the storage raises (the caller then deletes nothing).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs_, base = filesystem(uri)
    folder = f"{base}/{table}/month={month}"
    fs_.create_dir(folder, recursive=True)
    path = f"{folder}/{name}"
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    pq.write_table(pa.Table.from_pylist(rows), tmp, filesystem=fs_, compression="zstd")
    fs_.move(tmp, path)
    return display_uri(uri, path)


def probe(uri: str) -> None:
    """Write and delete a small file under `uri`; raise when the archive cannot be written."""
    fs_, base = filesystem(uri)
    fs_.create_dir(base, recursive=True)
    path = f"{base}/.rollmux-write-probe-{uuid.uuid4().hex[:8]}"
    with fs_.open_output_stream(path) as out:
        out.write(b"ok")
    fs_.delete_file(path)
