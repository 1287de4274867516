"""fuse.spark.common.store: which store Store.create picks, the layout under the prefix, and a
LocalStore's reads and writes (HDFS and DBFS cannot be reached here: only their paths are
checked)."""

import needs

needs.module("pyspark", "spark")
needs.module("pyarrow", "spark")

import pytest  # noqa: E402

from fuse.spark.common.store import (DBFSLocalStore, FilesystemStore, HDFSStore,  # noqa: E402
                                     LocalStore, Store)


@pytest.mark.parametrize("prefix, cls", [
    ("/tmp/x", LocalStore), ("file:///tmp/x", LocalStore), ("relative/dir", LocalStore),
    ("hdfs://namenode:8020/user/me", HDFSStore), ("/dbfs/ml/runs", DBFSLocalStore),
    ("dbfs:/ml/runs", DBFSLocalStore), ("s3://bucket/prefix", FilesystemStore),
])
def test_create_picks_the_store_by_scheme(prefix, cls):
    assert type(Store.create(prefix)) is cls


def test_layout_is_keyed_by_run_id(tmp_path):
    store = Store.create(str(tmp_path))
    assert store.get_train_data_path(3) == f"{tmp_path}/intermediate_train_data.3"
    assert store.get_val_data_path() == f"{tmp_path}/intermediate_val_data"
    assert store.get_checkpoint_path("r1") == f"{tmp_path}/runs/r1/checkpoint"
    assert store.get_logs_path("r1") == f"{tmp_path}/runs/r1/logs"
    assert store.get_full_path(store.get_train_data_path()).startswith("file:///")
    assert Store.create(str(tmp_path), save_runs=False).get_checkpoint_path("r1") is None


def test_local_store_writes_whole_files(tmp_path):
    store = LocalStore(f"file://{tmp_path}")
    path = store.get_checkpoint_path("r")
    assert not store.exists(path)
    store.write(path, b"one")
    store.write(path, b"two")
    assert store.read(path) == b"two" and store.exists(path)
    assert sorted(p.name for p in (tmp_path / "runs" / "r").iterdir()) == ["checkpoint"]
    store.delete(store.get_run_path("r"))
    assert not store.exists(path)


def test_hdfs_and_dbfs_paths():
    hdfs = HDFSStore("hdfs://namenode:8020/user/me")
    assert hdfs.get_full_path(hdfs.get_run_path("r")) == "hdfs://namenode:8020/user/me/runs/r"
    assert hdfs.get_localized_path("hdfs://namenode:8020/user/me/x") == "/user/me/x"
    with pytest.raises(ValueError, match="hdfs://"):
        HDFSStore("/not/hdfs")
    dbfs = DBFSLocalStore("dbfs:/ml")
    assert dbfs.prefix_path == "/dbfs/ml"
    assert dbfs.get_full_path(dbfs.get_train_data_path()) == "dbfs:/ml/intermediate_train_data"
    assert dbfs.get_localized_path("dbfs:/ml/a") == "/dbfs/ml/a"
