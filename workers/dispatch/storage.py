"""Checkpoint storage every node can reach: ROLLMUX_CHECKPOINT_URI through `pyarrow.fs`.

A plain path or `file://` URI is a shared directory (NFS or similar in production; one
disk on one machine); `s3://bucket/prefix`, `gs://...` or `hdfs://...` is object storage,
with the credentials pyarrow reads from the environment. A resubmitted job resumes on
other nodes, so its checkpoint must never live only on the disk of the node that died.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

KEEP_CHECKPOINTS = 2

_fs_lock = threading.Lock()
_filesystems: dict[str, tuple[Any, str]] = {}


def _filesystem(uri: str) -> tuple[Any, str]:
    """Return (pyarrow filesystem, base path) for a URI or a local path, cached per process."""
    with _fs_lock:
        if uri not in _filesystems:
            from pyarrow import fs

            if "://" in uri:
                filesystem, base = fs.FileSystem.from_uri(uri)
            else:
                import os

                filesystem, base = fs.LocalFileSystem(), os.path.abspath(uri)
            _filesystems[uri] = (filesystem, base.rstrip("/"))
        return _filesystems[uri]


class CheckpointStore:
    """Read and write one job's checkpoints under a storage URI."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __bool__(self) -> bool:
        return bool(self.uri)

    def path(self, job_id: int, iterations_done: int) -> str:
        _, base = _filesystem(self.uri)
        return f"{base}/job-{job_id}-it{iterations_done}.ckpt"

    def write(self, job_id: int, iterations_done: int, blob: bytes) -> None:
        """Write a checkpoint atomically (a reader never sees half of one); keep the last two."""
        if not self.uri:
            return
        filesystem, base = _filesystem(self.uri)
        filesystem.create_dir(base, recursive=True)
        path = self.path(job_id, iterations_done)
        tmp = f"{path}.tmp"
        with filesystem.open_output_stream(tmp) as out:
            out.write(blob)
        filesystem.move(tmp, path)  # a rename on a shared directory; a copy on object storage
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(self.path(job_id, iterations_done - KEEP_CHECKPOINTS))

    def read(self, job_id: int, iterations_done: int) -> bytes | None:
        if not self.uri:
            return None
        filesystem, _ = _filesystem(self.uri)
        try:
            with filesystem.open_input_stream(self.path(job_id, iterations_done)) as src:
                return bytes(src.read())
        except (FileNotFoundError, OSError):
            return None
