"""The driver's side of an estimator's data: check the DataFrame, split off the validation
rows, and write both to Parquet in the store (vectors as arrays), once per DataFrame and store:
a second fit of the same DataFrame reads what the first wrote.

Every check here runs before any rank starts, so bad input is an error that names the column
or the setting instead of a failure somewhere in a rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["ColumnInfo", "Materialised", "check_num_proc", "describe_columns", "materialise",
           "row_shape", "clear_cache"]


@dataclass
class ColumnInfo:
    """What a training column holds: ``kind`` is 'scalar', 'array' or 'vector'; ``size`` the
    number of values per row (1 for a scalar); ``integer`` whether the values are integers."""
    name: str
    kind: str
    size: int
    integer: bool
    spark_type: str


@dataclass
class Materialised:
    train_path: str
    val_path: str | None
    train_rows: int
    val_rows: int
    columns: dict = field(default_factory=dict)        # name -> ColumnInfo


def check_num_proc(sc, num_proc) -> int:
    """``num_proc``, or the cluster's task slots when None; an error when the cluster cannot
    run that many tasks at once (the barrier stage would wait for slots forever)."""
    slots = sc.defaultParallelism
    n = slots if num_proc is None else num_proc
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"num_proc must be a positive integer, got {num_proc!r}")
    if n > slots:
        raise ValueError(f"num_proc={n} is more than this Spark cluster can run at once "
                         f"({slots} task slots, spark.default.parallelism); the ranks run as one "
                         "barrier stage, which needs a slot for each")
    return n


def _column_kind(name: str, data_type) -> tuple[str, bool]:
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import types as T
    numeric = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
               T.BooleanType, T.DecimalType)
    integer = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    if isinstance(data_type, VectorUDT):
        return "vector", False
    if isinstance(data_type, T.ArrayType) and isinstance(data_type.elementType, numeric):
        return "array", isinstance(data_type.elementType, integer)
    if isinstance(data_type, numeric):
        return "scalar", isinstance(data_type, integer)
    raise TypeError(f"column {name!r} holds {data_type.simpleString()}, which is not numeric: "
                    "an estimator trains on numeric scalars, numeric arrays and ml Vectors")


def describe_columns(df, columns: list[str], input_shapes: dict | None = None) -> dict:
    """Check that every one of ``columns`` is in ``df`` and numeric, and that each array or
    vector column has the same length on every row (the length ``input_shapes`` gives it,
    where it gives one); return a ColumnInfo for each.  One Spark job for all lengths."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"column(s) {', '.join(map(repr, missing))} are not in the DataFrame "
                         f"(it has {', '.join(df.columns)})")
    kinds = {c: _column_kind(c, df.schema[c].dataType) for c in columns}
    sized = [c for c in columns if kinds[c][0] != "scalar"]
    sizes = {c: (1, 1) for c in columns if c not in sized}
    if sized:
        aggs = []
        for c in sized:
            values = vector_to_array(F.col(c)) if kinds[c][0] == "vector" else F.col(c)
            aggs += [F.min(F.size(values)).alias(f"min_{c}"), F.max(F.size(values)).alias(f"max_{c}")]
        row = df.agg(*aggs).first()
        for c in sized:
            sizes[c] = (row[f"min_{c}"], row[f"max_{c}"])
    infos = {}
    for c in columns:
        low, high = sizes[c]
        if low != high:
            raise ValueError(f"column {c!r} has rows of different lengths ({low} to {high}); "
                             "every row must have the same shape")
        expected = _expected_size(c, (input_shapes or {}).get(c))
        if expected is not None and low is not None and expected != low:
            raise ValueError(f"column {c!r} has {low} value(s) per row, but input_shapes gives "
                             f"it shape {list(input_shapes[c])} ({expected} values)")
        infos[c] = ColumnInfo(c, kinds[c][0], 1 if low is None else int(low), kinds[c][1],
                              df.schema[c].dataType.simpleString())
    return infos


def row_shape(shape, name: str = "") -> list[int] | None:
    """The shape of one row from an ``input_shapes`` (or ``label_shapes``) entry: a shape whose
    first dimension is -1 (or None) includes the batch dimension, as a Keras input's does
    (``[-1, 8, 8, 1]``); any other is the shape of a row (``[2]``), as Horovod's torch
    estimator takes it.  None stays None."""
    if shape is None:
        return None
    dims = list(shape)
    if dims and dims[0] in (-1, None):
        dims = dims[1:]          # the batch dimension
    if any(d is None or int(d) < 0 for d in dims):
        raise ValueError(f"input_shapes[{name!r}] = {list(shape)}: only the first (batch) "
                         "dimension may be -1")
    return [int(d) for d in dims]


def _expected_size(name: str, shape) -> int | None:
    dims = row_shape(shape, name)
    return None if dims is None else math.prod(dims)


# (store, the DataFrame's plan, what is written) -> the data written for it, so that a second
# fit of the same DataFrame into the same store reads what the first wrote
_WRITTEN: dict[tuple, Materialised] = {}


def clear_cache() -> None:
    """Forget what was materialised: the next ``fit`` writes its DataFrame again (for a
    DataFrame whose source changed under the same plan, say files rewritten in place)."""
    _WRITTEN.clear()


def materialise(df, store, run_id: str, feature_cols: list[str], label_cols: list[str],
                sample_weight_col: str | None, validation, num_proc: int,
                partitions_per_process: int, input_shapes: dict | None,
                seed: int | None) -> Materialised:
    """Check ``df`` and write its training (and validation) rows to Parquet under the store's
    data paths, in ``num_proc * partitions_per_process`` files each; a DataFrame with the
    same plan written into the same store the same way before is not written again.
    (``run_id`` names the run only: the data's place depends on what is written.)"""
    columns = _check_settings(df, feature_cols, label_cols, sample_weight_col, validation)
    files = num_proc * max(1, int(partitions_per_process))
    key = _cache_key(df, store, columns, validation, seed, files)
    cached = _WRITTEN.get(key) if key is not None else None
    if cached is not None and _still_there(store, cached):
        for name, info in cached.columns.items():
            expected = _expected_size(name, (input_shapes or {}).get(name))
            if expected is not None and expected != info.size:
                raise ValueError(f"column {name!r} has {info.size} value(s) per row, but "
                                 f"input_shapes gives it shape {list(input_shapes[name])} "
                                 f"({expected} values)")
        _check_rows(cached, num_proc, validation)
        return cached
    if not df.head(1):
        raise ValueError("the DataFrame is empty: there is nothing to train on")
    infos = describe_columns(df, columns, input_shapes)
    data = _write_data(df, store, _dataset_id(key), columns, infos, validation, seed, files)
    _check_rows(data, num_proc, validation)
    if key is not None:
        _WRITTEN[key] = data
    return data


def _check_settings(df, feature_cols, label_cols, sample_weight_col, validation) -> list[str]:
    """The columns to write, after checking the settings that name them."""
    if not feature_cols:
        raise ValueError("feature_cols is not set: name the DataFrame's feature columns")
    if not label_cols:
        raise ValueError("label_cols is not set: name the DataFrame's label columns")
    val_col = validation if isinstance(validation, str) else None
    if val_col is not None and val_col not in df.columns:
        raise ValueError(f"validation column {val_col!r} is not in the DataFrame "
                         f"(it has {', '.join(df.columns)})")
    if validation is not None and val_col is None:
        if not isinstance(validation, (int, float)) or not 0 <= validation < 1:
            raise ValueError(f"validation must be a fraction in [0, 1) or a column name, "
                             f"got {validation!r}")
    return list(dict.fromkeys(feature_cols + label_cols +
                              ([sample_weight_col] if sample_weight_col else [])))


def _cache_key(df, store, columns, validation, seed, files) -> tuple | None:
    """What decides the data written; None for a DataFrame whose plan cannot be read (Spark
    Connect's), which is then written every time."""
    try:
        plan = df._jdf.queryExecution().analyzed()
        plan_key = (int(plan.semanticHash()), plan.toString())
    except Exception:
        return None
    split_seed = seed if isinstance(validation, float) and validation else None
    return (store.get_train_data_path(), plan_key, df.schema.json(), tuple(columns),
            validation, split_seed, files)


def _dataset_id(key: tuple | None) -> str:
    import hashlib
    import uuid
    if key is None:
        return f"fuse_{uuid.uuid4().hex[:12]}"
    return "fuse_" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def _still_there(store, data: Materialised) -> bool:
    return store.is_parquet_dataset(data.train_path) and (
        data.val_path is None or store.is_parquet_dataset(data.val_path))


def _check_rows(data: Materialised, num_proc: int, validation) -> None:
    if data.train_rows < num_proc:
        raise ValueError(f"only {data.train_rows} training row(s) for num_proc={num_proc} "
                         "ranks" + (" after the validation split" if data.val_path else "")
                         + ": every rank needs at least one row")
    if data.val_path is not None and data.val_rows == 0:
        raise ValueError(f"validation={validation!r} leaves no validation rows")


def _write_data(df, store, dataset_id: str, columns, infos, validation, seed,
                files: int) -> Materialised:
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    selected = [(vector_to_array(F.col(c)) if infos[c].kind == "vector" else F.col(c)).alias(c)
                for c in columns]
    if isinstance(validation, str):
        flag = F.col(validation).cast("boolean")
        train = df.where(~flag | flag.isNull()).select(*selected)
        val = df.where(flag).select(*selected)
    elif validation:
        train, val = df.select(*selected).randomSplit([1.0 - validation, validation],
                                                      seed=seed)
    else:
        train, val = df.select(*selected), None
    train_path = store.get_train_data_path(dataset_id)
    _write(train, store, train_path, files)
    train_rows = store.get_parquet_dataset(train_path).count_rows()
    val_path, val_rows = None, 0
    if val is not None:
        val_path = store.get_val_data_path(dataset_id)
        _write(val, store, val_path, files)
        val_rows = store.get_parquet_dataset(val_path).count_rows()
    return Materialised(train_path, val_path, train_rows, val_rows, infos)


def _write(df, store, path: str, files: int) -> None:
    df.repartition(files).write.mode("overwrite").parquet(store.get_full_path(path))
