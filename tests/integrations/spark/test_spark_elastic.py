"""fuse.spark.run_elastic on a real local Spark that retries a failed task once
(``local[2,2]``): an elastic torch training on two tasks.  When one rank's process is
SIGKILLed, the other task's rank re-forms the job alone; when a task itself is killed (its
Python worker), Spark runs it again and the new attempt joins the job as a new host.  The
workers of the last generation must end with the weights rebuilt from their log of committed
steps, bit for bit (workers_integrations_elastic.check)."""

import needs
import pytest

needs.module("pyspark", "spark")
needs.module("torch")

import workers_integrations_elastic  # noqa: E402

import fuse.spark  # noqa: E402
from fuse.runner.api import WorkerError  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def spark():
    """local[2,2]: 2 task slots, and a failed task is run once more."""
    from spark_util import local_spark
    with local_spark("local[2,2]") as session:
        yield session


def test_a_killed_rank_leaves_the_other_task_training(spark, tmp_path):
    epochs = 2
    results = fuse.spark.run_elastic(workers_integrations_elastic.train,
                                     args=(str(tmp_path), epochs, [("kill", 0, 1, 7)]),
                                     num_proc=2, min_num_proc=1, elastic_timeout=60,
                                     start_timeout=120)
    workers_integrations_elastic.check(results, 1, epochs)
    assert results[0]["generation"] == 1
    sizes = [p[1] for p in workers_integrations_elastic.progress(str(tmp_path))]
    assert sizes[0] == 2 and sizes[-1] == 1, sizes


def test_a_killed_task_is_run_again_and_rejoins(spark, tmp_path):
    epochs = 4
    results = fuse.spark.run_elastic(workers_integrations_elastic.train,
                                     args=(str(tmp_path), epochs, [("killparent", 0, 1, 7)],
                                           0.05),
                                     num_proc=2, min_num_proc=1, elastic_timeout=60,
                                     start_timeout=120)
    workers_integrations_elastic.check(results, 2, epochs)
    assert results[0]["generation"] >= 1
    progress = workers_integrations_elastic.progress(str(tmp_path))
    assert progress[0][:2] == (0, 2) and progress[-1][1] == 2, progress


def test_too_few_ranks_left_fails_with_the_reason(spark, tmp_path):
    """min_num_proc=2: losing one of two ranks leaves too few; the job ends (after the elastic
    timeout) with an error that names the killed worker."""
    with pytest.raises(WorkerError, match="fewer than --min-np 2") as info:
        fuse.spark.run_elastic(workers_integrations_elastic.train,
                               args=(str(tmp_path), 2, [("kill", 0, 0, 3)]),
                               num_proc=2, min_num_proc=2, elastic_timeout=3,
                               start_timeout=120)
    assert "SIGKILL" in str(info.value), str(info.value)


def test_arguments_are_checked(spark):
    with pytest.raises(ValueError, match="min_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, min_num_proc=3)
    with pytest.raises(ValueError, match="max_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, max_num_proc=1)
