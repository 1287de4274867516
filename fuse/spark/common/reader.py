"""The ranks' side of an estimator's data: each rank reads its own shard of the materialised
Parquet files with ``pyarrow.dataset`` and makes full batches from it, shuffled through a
buffer.

The shard is every ``size``-th file that holds rows, from ``rank`` on (Spark wrote ``num_proc *
partitions_per_process`` files of near-equal size; a DataFrame with fewer rows than that leaves
some of them empty).  When fewer files than ranks hold rows, every rank reads them all and keeps
every ``size``-th row from ``rank`` on instead.  Batches never end with a short one: a pass's
last rows carry over into the next pass, so that every rank takes the same number of steps per
epoch, which the collectives need.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ShardReader"]


class ShardReader:
    """Batches (dicts column -> numpy array) of ``columns`` from this rank's files of the
    Parquet dataset at ``path``, forever; ``shuffle`` permutes them through a buffer of
    ``buffer_size`` rows (None: the whole shard)."""

    def __init__(self, store, path: str, rank: int, size: int, columns: list[str],
                 batch_size: int, shuffle: bool = False, buffer_size: int | None = None,
                 seed: int | None = None, transformation_fn=None):
        dataset = store.get_parquet_dataset(path)
        self.filesystem = dataset.filesystem
        rows = {f: self._rows_in(f) for f in sorted(dataset.files)}
        files = [f for f, n in rows.items() if n]
        if not files:
            raise RuntimeError(f"rank {rank} of {size} has no data: the Parquet files of "
                               f"{path} hold no rows")
        # (rank, size) of the row split inside the files; None: whole files per rank
        self.row_split = None if len(files) >= size else (rank, size)
        self.files = files if self.row_split else files[rank::size]
        # each file's first row's place among all rows (the row split counts across files)
        self.first_row = dict(zip(files, np.cumsum([0] + [rows[f] for f in files])))
        self.columns, self.batch_size = list(columns), int(batch_size)
        self.shuffle, self.transformation_fn = shuffle, transformation_fn
        self.buffer_size = None if buffer_size is None else max(int(buffer_size), 2)
        self.rng = np.random.default_rng(None if seed is None else [seed, rank])

    def batches(self):
        """Full batches, pass after pass over the shard, forever."""
        pending: dict | None = None
        while True:
            for chunk in self._pass():
                pending = chunk if pending is None else _concat(pending, chunk)
                while _rows(pending) >= self.batch_size:
                    yield _take(pending, 0, self.batch_size)
                    pending = _take(pending, self.batch_size, None)

    def _pass(self):
        """One pass over the shard in chunks of rows (shuffled when asked)."""
        order = list(self.files)
        if self.shuffle:
            self.rng.shuffle(order)
        buffer: dict | None = None
        for path in order:
            chunk = self._read(path)
            if chunk is None:
                continue        # none of this file's rows are this rank's
            if not self.shuffle:
                yield chunk
                continue
            buffer = chunk if buffer is None else _concat(buffer, chunk)
            if self.buffer_size is not None and _rows(buffer) >= self.buffer_size:
                buffer = _take(buffer, self.rng.permutation(_rows(buffer)), None)
                keep = self.buffer_size // 2        # the rest mixes with the next files
                yield _take(buffer, keep, None)
                buffer = _take(buffer, 0, keep)
        if buffer is not None and _rows(buffer):
            yield _take(buffer, self.rng.permutation(_rows(buffer)), None)

    def _rows_in(self, path: str) -> int:
        import pyarrow.parquet as pq
        with self.filesystem.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def _read(self, path: str) -> dict | None:
        """The file's rows of this rank as columns, None when there are none."""
        import pyarrow.parquet as pq
        table = pq.read_table(path, columns=self.columns, filesystem=self.filesystem)
        if self.row_split is not None:
            rank, size = self.row_split
            start = (rank - self.first_row[path]) % size
            table = table.take(list(range(start, len(table), size)))
        if self.transformation_fn is not None:
            import pyarrow as pa
            table = pa.Table.from_pandas(self.transformation_fn(table.to_pandas()),
                                         preserve_index=False)
        if not len(table):
            return None
        out = {}
        for name in self.columns:
            column = table.column(name).combine_chunks()
            if column.null_count:
                raise ValueError(f"column {name!r} has {column.null_count} null value(s) in "
                                 f"{path}: fill or drop them before fit")
            out[name] = _to_numpy(column, len(table))
        return out


def _to_numpy(column, rows: int) -> np.ndarray:
    import pyarrow as pa
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(rows, -1)
    return column.to_numpy(zero_copy_only=False)


def _rows(chunk: dict) -> int:
    return len(next(iter(chunk.values())))


def _concat(a: dict, b: dict) -> dict:
    return {k: np.concatenate([a[k], b[k]]) for k in a}


def _take(chunk: dict, start, stop) -> dict:
    if isinstance(start, np.ndarray):
        return {k: v[start] for k, v in chunk.items()}
    return {k: v[start:stop] for k, v in chunk.items()}
