"""fuse.spark.run_elastic on a real local Spark that retries a failed task once
(``local[2,2]``): an elastic torch training on two tasks.  A task whose rank fails (raises, or
its process is SIGKILLed) fails too, so Spark runs it again and the new attempt joins the job
as a new host; so does a task that is itself killed (its Python worker).  Once Spark gives a
task up, the job ends if too few are left.  The workers of the last generation must end
with the weights rebuilt from their log of committed steps, bit for bit
(workers_integrations_elastic.check)."""

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


def test_a_failing_rank_is_run_again_and_the_job_goes_on(spark, tmp_path):
    """min_num_proc=2: the job goes on only once the failed rank's task is back, which it is
    long before elastic_timeout (60 s) ends the job."""
    epochs = 1
    results = fuse.spark.run_elastic(workers_integrations_elastic.train,
                                     args=(str(tmp_path), epochs, [("raise", 0, 1, 7)]),
                                     num_proc=2, min_num_proc=2, elastic_timeout=60,
                                     start_timeout=120)
    workers_integrations_elastic.check(results, 2, epochs)
    assert results[0]["generation"] >= 1
    progress = workers_integrations_elastic.progress(str(tmp_path))
    assert progress[0][:2] == (0, 2) and progress[-1][:2] == (results[0]["generation"], 2), \
        progress


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
    """min_num_proc=2 and rank 1 killed in every generation: its task fails twice, Spark
    gives it up (local[2,2]), too few are left, and the job ends (after the elastic timeout)
    with an error that names the killed worker."""
    with pytest.raises(WorkerError, match="fewer than --min-np 2") as info:
        fuse.spark.run_elastic(workers_integrations_elastic.train,
                               args=(str(tmp_path), 2, [("kill", None, 1, 3)]),
                               num_proc=2, min_num_proc=2, elastic_timeout=3,
                               start_timeout=120)
    assert "SIGKILL" in str(info.value), str(info.value)


def test_arguments_are_checked(spark):
    with pytest.raises(ValueError, match="min_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, min_num_proc=3)
    with pytest.raises(ValueError, match="max_num_proc"):
        fuse.spark.run_elastic(lambda: 1, num_proc=2, max_num_proc=1)
