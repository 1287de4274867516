"""The list of Horovod knobs fuse ignores, and the warning naming them."""

from fuse.common.ignored_knobs import IGNORED, ignored_knobs_warning, ignored_settings
from fuse.config import Config


def test_no_ignored_knob_is_implemented():
    implemented = {alias for _f, alias, _d, _doc in Config.describe() if alias}
    assert not {"HOROVOD_" + s for s in IGNORED} & implemented


def test_both_spellings_and_defaults():
    env = {"FUSE_TORUS_ALLREDUCE": "1", "HOROVOD_NUM_NCCL_STREAMS": "1",
           "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "1024", "HOROVOD_SPARK_WORK_DIR": "/tmp"}
    assert ignored_settings(env) == ["FUSE_TORUS_ALLREDUCE=1",
                                     "HOROVOD_ADASUM_MPI_CHUNK_SIZE=1024",
                                     "HOROVOD_SPARK_WORK_DIR=/tmp"]
    assert ignored_knobs_warning({"HOROVOD_CYCLE_TIME": "5"}) is None
