"""fuse.spark.run_elastic on a real local Spark (local[2]): an elastic torch training on two
tasks, one of whose rank processes is SIGKILLed; the other task's rank re-forms the job alone
and ends with the weights rebuilt from its log of committed steps, bit for bit."""

import needs
import pytest

needs.module("pyspark", "spark")
needs.module("torch")

import elastic_training  # noqa: E402

import fuse.spark  # noqa: E402
from fuse.runner.api import WorkerError  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_a_killed_rank_leaves_the_other_task_training(spark, tmp_path):
    epochs = 2
    results = fuse.spark.run_elastic(elastic_training.train,
                                     args=(str(tmp_path), epochs, [("kill", 0, 1, 7)]),
                                     num_proc=2, min_num_proc=1, elastic_timeout=60,
                                     start_timeout=120)
    elastic_training.check(results, 1, epochs)
    assert results[0]["generation"] == 1
    sizes = [p[1] for p in elastic_training.progress(str(tmp_path))]
    assert sizes[0] == 2 and sizes[-1] == 1, sizes


def test_too_few_ranks_left_fails_with_the_reason(spark, tmp_path):
    """min_num_proc=2: losing one of two ranks leaves too few; the job ends (after the elastic
    timeout) with an error that names the killed worker."""
    with pytest.raises(WorkerError, match="fewer than --min-np 2") as info:
        fuse.spark.run_elastic(elastic_training.train,
                               args=(str(tmp_path), 2, [("kill", 0, 0, 3)]),
                               num_proc=2, min_num_proc=2, elastic_timeout=3,
                               start_timeout=120)
    assert "SIGKILL" in str(info.value), str(info.value)


def test_arguments_are_checked(spark):
    with pytest.raises(ValueError, match="min_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, min_num_proc=3)
    with pytest.raises(ValueError, match="max_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, max_num_proc=1)
