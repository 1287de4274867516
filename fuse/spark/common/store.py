"""Stores: where a Spark estimator keeps what it materialises and what it trains into.

A store is a prefix on a filesystem that both the Spark driver and every rank can reach.  Under
it: the materialised train/validation/test data (Parquet, written by Spark), and one folder per
run (keyed by ``run_id``) with that run's checkpoint and logs.  Spark writes through the path
as a URL (``get_full_path``); the ranks read and write through ``pyarrow.fs`` (``filesystem``
and ``get_localized_path``), which needs no Hadoop client in the rank's Python.

``Store.create(prefix)`` picks the store by the prefix: ``hdfs://`` -> :class:`HDFSStore`,
``/dbfs/`` or ``dbfs:/`` -> :class:`DBFSLocalStore`, anything else -> :class:`FilesystemStore`
(:class:`LocalStore` for a plain local path or ``file://``).  Names as in Horovod.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import urlparse

__all__ = ["Store", "FilesystemStore", "LocalStore", "HDFSStore", "DBFSLocalStore"]

_TRAIN = "intermediate_train_data"
_VAL = "intermediate_val_data"
_TEST = "intermediate_test_data"
_RUNS = "runs"
_CHECKPOINT = "checkpoint"
_LOGS = "logs"


class Store:
    """The layout every store shares; subclasses say how paths reach a filesystem."""

    def __init__(self, prefix_path: str, train_path: str | None = None,
                 val_path: str | None = None, test_path: str | None = None,
                 runs_path: str | None = None, save_runs: bool = True):
        self.prefix_path = self._normalise(prefix_path)
        self._train_path = train_path or self._join(self.prefix_path, _TRAIN)
        self._val_path = val_path or self._join(self.prefix_path, _VAL)
        self._test_path = test_path or self._join(self.prefix_path, _TEST)
        self._runs_path = runs_path or self._join(self.prefix_path, _RUNS)
        self._save_runs = save_runs

    @staticmethod
    def create(prefix_path: str, *args, **kwargs) -> "Store":
        """The store for ``prefix_path``'s scheme (see the module's docstring)."""
        if prefix_path.startswith("hdfs://"):
            return HDFSStore(prefix_path, *args, **kwargs)
        if prefix_path.startswith(("/dbfs/", "dbfs:/")):
            return DBFSLocalStore(prefix_path, *args, **kwargs)
        if "://" not in prefix_path or prefix_path.startswith("file://"):
            return LocalStore(prefix_path, *args, **kwargs)
        return FilesystemStore(prefix_path, *args, **kwargs)

    # -- the layout ------------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def _normalise(self, path: str) -> str:
        return path.rstrip("/") or "/"

    def _with_index(self, base: str, idx) -> str:
        return base if idx is None else f"{base}.{idx}"

    def get_train_data_path(self, idx=None) -> str:
        return self._with_index(self._train_path, idx)

    def get_val_data_path(self, idx=None) -> str:
        return self._with_index(self._val_path, idx)

    def get_test_data_path(self, idx=None) -> str:
        return self._with_index(self._test_path, idx)

    def get_runs_path(self) -> str:
        return self._runs_path

    def get_run_path(self, run_id: str) -> str:
        return self._join(self._runs_path, run_id)

    def get_checkpoints_path(self) -> str:
        return self._runs_path

    def get_checkpoint_filename(self) -> str:
        return _CHECKPOINT

    def _run_entry(self, run_id: str, name: str) -> str | None:
        """``name`` inside the run's folder (None when the store does not keep runs)."""
        if not self._save_runs:
            return None
        return self._join(self.get_run_path(run_id), name)

    def get_checkpoint_path(self, run_id: str) -> str | None:
        """The run's checkpoint file (None when the store does not keep runs)."""
        return self._run_entry(run_id, self.get_checkpoint_filename())

    def get_logs_subdir(self) -> str:
        return _LOGS

    def get_logs_path(self, run_id: str) -> str | None:
        return self._run_entry(run_id, self.get_logs_subdir())

    @property
    def saving_runs(self) -> bool:
        return self._save_runs

    # -- reaching the filesystem -----------------------------------------------------------
    @property
    def filesystem(self):
        """The ``pyarrow.fs`` filesystem that ``get_localized_path`` paths are on."""
        raise NotImplementedError

    def get_full_path(self, path: str) -> str:
        """``path`` as Spark's readers and writers take it (a URL)."""
        raise NotImplementedError

    def get_localized_path(self, path: str) -> str:
        """``path`` as ``filesystem`` takes it."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        from pyarrow import fs
        info = self.filesystem.get_file_info(self.get_localized_path(path))
        return info.type != fs.FileType.NotFound

    def read(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(self.get_localized_path(path)) as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` whole: to a temporary name first, then renamed, so a rank
        that dies while writing leaves the previous file (a checkpoint) as it was."""
        local = self.get_localized_path(path)
        self.filesystem.create_dir(posixpath.dirname(local), recursive=True)
        partial = f"{local}.partial-{os.getpid()}"
        with self.filesystem.open_output_stream(partial) as f:
            f.write(data)
        self.filesystem.move(partial, local)

    def write_text(self, path: str, text: str) -> None:
        self.write(path, text.encode())

    def delete(self, path: str) -> None:
        from pyarrow import fs
        local = self.get_localized_path(path)
        info = self.filesystem.get_file_info(local)
        if info.type == fs.FileType.Directory:
            self.filesystem.delete_dir(local)
        elif info.type == fs.FileType.File:
            self.filesystem.delete_file(local)

    def is_parquet_dataset(self, path: str) -> bool:
        """Whether ``path`` holds a Parquet dataset that Spark finished writing."""
        return self.exists(posixpath.join(path, "_SUCCESS"))

    def get_parquet_dataset(self, path: str):
        """``path``'s Parquet files as a ``pyarrow.dataset.Dataset``."""
        import pyarrow.dataset as ds
        return ds.dataset(self.get_localized_path(path), format="parquet",
                          filesystem=self.filesystem)

    def sync_fn(self, run_id: str):
        """A function that copies a rank's local folder into the run's folder (Horovod's hook
        for logs written locally, e.g. TensorBoard)."""
        def sync(local_run_path: str) -> None:
            from pyarrow import fs
            fs.copy_files(local_run_path, self.get_localized_path(self.get_run_path(run_id)),
                          source_filesystem=fs.LocalFileSystem(),
                          destination_filesystem=self.filesystem)
        return sync

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.prefix_path!r})"


class FilesystemStore(Store):
    """A store on any filesystem ``pyarrow.fs`` reaches by URL (local, ``s3://``, ``gs://``,
    ...).  ``storage_options`` go to ``pyarrow.fs.FileSystem.from_uri``'s result's options
    where it takes any; Horovod's went to fsspec."""

    def __init__(self, prefix_path: str, *args, storage_options: dict | None = None, **kwargs):
        super().__init__(prefix_path, *args, **kwargs)
        self.storage_options = storage_options or {}
        self._fs = None
        self._root = ""

    @property
    def filesystem(self):
        if self._fs is None:
            from pyarrow import fs
            self._fs, self._root = fs.FileSystem.from_uri(self.prefix_path)
        return self._fs

    def get_full_path(self, path: str) -> str:
        return path

    def get_localized_path(self, path: str) -> str:
        parsed = urlparse(path)
        if not parsed.scheme:
            return path
        if parsed.scheme == "file":
            return parsed.path
        return (parsed.netloc + parsed.path) if parsed.netloc else parsed.path

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fs"] = None         # made again where it is used (a rank, an executor)
        return state


class LocalStore(FilesystemStore):
    """A store on a local (or locally mounted, shared) folder: ``/path`` or ``file:///path``.
    Every executor must see the same folder at the same path."""

    def __init__(self, prefix_path: str, *args, **kwargs):
        if prefix_path.startswith("file://"):
            prefix_path = urlparse(prefix_path).path
        super().__init__(os.path.abspath(prefix_path), *args, **kwargs)

    @property
    def filesystem(self):
        if self._fs is None:
            from pyarrow import fs
            self._fs = fs.LocalFileSystem()
        return self._fs

    def get_full_path(self, path: str) -> str:
        return path if path.startswith("file://") else "file://" + path

    def get_localized_path(self, path: str) -> str:
        return urlparse(path).path if path.startswith("file://") else path


class HDFSStore(Store):
    """A store on HDFS (``hdfs://namenode:port/path``), reached through
    ``pyarrow.fs.HadoopFileSystem`` (which needs ``libhdfs`` and a Hadoop classpath on every
    executor).  ``host``/``port``/``user``/``kerb_ticket`` override what the URL says."""

    def __init__(self, prefix_path: str, host: str | None = None, port: int | None = None,
                 user: str | None = None, kerb_ticket: str | None = None, *args, **kwargs):
        parsed = urlparse(prefix_path)
        if parsed.scheme != "hdfs":
            raise ValueError(f"HDFSStore needs an hdfs:// prefix, got {prefix_path!r}")
        self._host = host or parsed.hostname or "default"
        self._port = port if port is not None else (parsed.port or 0)
        self._user, self._kerb_ticket = user, kerb_ticket
        self._fs = None
        super().__init__(prefix_path, *args, **kwargs)

    @property
    def filesystem(self):
        if self._fs is None:
            from pyarrow import fs
            self._fs = fs.HadoopFileSystem(self._host, self._port, user=self._user,
                                           kerb_ticket=self._kerb_ticket)
        return self._fs

    def get_full_path(self, path: str) -> str:
        if path.startswith("hdfs://"):
            return path
        return f"hdfs://{self._host}:{self._port}{path}" if self._port else f"hdfs://{self._host}{path}"

    def get_localized_path(self, path: str) -> str:
        return urlparse(path).path if path.startswith("hdfs://") else path

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fs"] = None
        return state


class DBFSLocalStore(LocalStore):
    """A store on Databricks' DBFS through its local mount: the ranks use ``/dbfs/...``, Spark
    ``dbfs:/...``.  Either form is accepted as the prefix."""

    def __init__(self, prefix_path: str, *args, **kwargs):
        if prefix_path.startswith("dbfs:/"):
            prefix_path = "/dbfs/" + prefix_path[len("dbfs:/"):].lstrip("/")
        super().__init__(prefix_path, *args, **kwargs)

    def get_full_path(self, path: str) -> str:
        local = self.get_localized_path(path)
        if local.startswith("/dbfs/"):
            return "dbfs:/" + local[len("/dbfs/"):]
        return local

    def get_localized_path(self, path: str) -> str:
        if path.startswith("dbfs:/"):
            return "/dbfs/" + path[len("dbfs:/"):].lstrip("/")
        return super().get_localized_path(path)
