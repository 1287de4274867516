"""fuse.run: results in rank order, kwargs, exception propagation (real worker processes)."""

import os

import pytest

from fuse.runner import WorkerError, run

pytestmark = pytest.mark.timeout(60)


def rank_times(x, offset=0):
    return int(os.environ["FUSE_RANK"]) * x + offset, os.environ["FUSE_SIZE"]


def test_results_in_rank_order_with_kwargs():
    assert run(rank_times, args=(10,), kwargs={"offset": 1}, np=3) == [
        (1, "3"), (11, "3"), (21, "3")]
    assert run(rank_times, args=(2,), num_proc=2) == [(0, "2"), (2, "2")]


def test_closure_and_env():
    base = 100
    got = run(lambda: base + int(os.environ["FUSE_RANK"]) + int(os.environ["EXTRA"]), np=2,
              env=dict(os.environ, EXTRA="5"))
    assert got == [105, 106]


def fail_on_rank_1():
    if os.environ["FUSE_RANK"] == "1":
        raise KeyError("missing thing on rank 1")
    import time
    time.sleep(30)  # stopped by the launcher once rank 1 fails
    return "never"


def test_exception_type_and_rank():
    with pytest.raises(KeyError, match="missing thing on rank 1") as info:
        run(fail_on_rank_1, np=3)
    cause = info.value.__cause__
    assert isinstance(cause, WorkerError)
    assert cause.rank == 1 and cause.exc_type == "KeyError"
    assert "rank 1 raised KeyError" in str(cause)
    assert "fail_on_rank_1" in cause.remote_traceback


class NotUnpicklable(Exception):
    def __init__(self, a, b):  # pickles, but unpickling calls __init__ with one argument
        super().__init__(f"{a}/{b}")


def raise_odd():
    raise NotUnpicklable("x", "y")


def test_exception_that_does_not_unpickle():
    with pytest.raises(WorkerError) as info:
        run(raise_odd, np=1)
    assert info.value.rank == 0
    assert "rank 0" in str(info.value)


def test_worker_dies_without_result():
    def die():
        if os.environ["FUSE_RANK"] == "0":
            os._exit(5)
        return 1
    with pytest.raises(WorkerError, match="rank 0 .*exited with code 5") as info:
        run(die, np=2)
    assert info.value.exit_code == 5


def test_argument_checks():
    with pytest.raises(ValueError):
        run(rank_times, np=2, num_proc=3)
    with pytest.raises(ValueError):
        run(rank_times, hosts="a:1", hostfile="f")
    with pytest.raises(ValueError):
        run(rank_times, use_gloo=True, use_mpi=True)
    # use_mpi=True itself works now: tests/backends/mpi runs the engine multi-process tests through it


# horovod.run's parameters, in its order (shared/reference/horovod.md, section 3.5)
HOROVOD_RUN = ["func", "args", "kwargs", "num_proc", "min_num_proc", "max_num_proc", "slots",
               "reset_limit", "cooldown_range", "hosts", "hostfile", "host_discovery_script",
               "start_timeout", "ssh_port", "ssh_identity_file", "disable_cache",
               "output_filename", "verbose", "use_gloo", "use_mpi", "mpi_args",
               "network_interface", "network_interfaces", "executable", "np", "min_np",
               "max_np"]


def test_every_argument_of_horovod_run_in_its_order():
    import inspect
    params = list(inspect.signature(run).parameters)
    assert params[:len(HOROVOD_RUN)] == HOROVOD_RUN
    # positionally too, as horovod.run(fn, args, kwargs, num_proc)
    assert run(_rank_and, (3,), {"extra": 1}, 2, disable_cache=True,
                    network_interface="lo") == [(0, 3, 1), (1, 3, 1)]


def _rank_and(value, extra=0):
    import fuse
    fuse.init()
    return (fuse.rank(), value, extra)


def _elastic_train(batches):
    import os
    import signal

    import numpy as np

    import fuse
    import fuse.elastic
    from fuse.worker.state import rendezvous_generation

    fuse.init()
    state = fuse.elastic.ObjectState(batch=0, total=0.0)

    @fuse.elastic.run
    def train(state):
        while state.batch < batches:
            if state.batch == 3 and rendezvous_generation() == 0 and fuse.rank() == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            state.total += float(fuse.allreduce(np.array([state.batch + 1.0]), op=fuse.Sum,
                                                name="x")[0]) / fuse.size()
            state.batch += 1
            state.commit()

    train(state)
    return fuse.rank(), fuse.size(), state.batch, state.total


def test_elastic_run_returns_the_last_generation_results():
    results = run(_elastic_train, (6,), np=3, min_np=2,
                  hosts="localhost:1,127.0.0.1:1,127.0.0.2:1")
    # as in Horovod, the results of ranks 0 .. min_np-1 of the last generation
    assert results == [(0, 2, 6, 21.0), (1, 2, 6, 21.0)]


@pytest.mark.parametrize("extra", [{"reset_limit": 3}, {"slots": 2},
                                   {"cooldown_range": (1, 10)}])
def test_elastic_only_arguments_need_elastic_mode(extra):
    with pytest.raises(ValueError, match="only apply in elastic mode"):
        run(_rank_and, (1,), np=2, **extra)


def test_elastic_needs_the_gloo_launcher():
    with pytest.raises(ValueError, match="elastic mode needs the Gloo launcher"):
        run(_rank_and, (1,), np=2, min_np=1, use_mpi=True)
