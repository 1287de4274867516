"""horovod.tensorflow's submodules on fuse.tensorflow (issue 24), on 2 real workers."""

import needs
import pytest

needs.module("tensorflow")

from tf_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_horovod_submodules():
    import workers_tf_compat as w
    for checks in run_job(w.submodules):
        assert all(checks.values()), checks


def test_elastic_state_restores_the_synced_values():
    import workers_tf_compat as w
    for checks in run_job(w.elastic_state_restore_after_sync):
        assert all(checks.values()), checks
