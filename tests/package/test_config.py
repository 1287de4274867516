"""Configuration: FUSE_ names, HOROVOD_ aliases, parsing.  (The configuration reference is
generated from Config: tests/docs/test_reference_coverage.py checks it covers every variable.)"""

import pytest

from fuse.config import Config


def test_defaults_match_horovod():
    cfg = Config.from_env({})
    assert cfg.fusion_threshold == 128 * 1024 * 1024
    assert cfg.cycle_time_ms == 1.0
    assert cfg.cache_capacity == 1024
    assert cfg.stall_check_time_seconds == 60.0
    assert cfg.stall_shutdown_time_seconds == 0.0
    assert cfg.log_level == "warning"
    assert cfg.backend == "gloo"
    assert cfg.explicit == {}


def test_horovod_alias_is_read_and_fuse_name_wins():
    cfg = Config.from_env({"HOROVOD_FUSION_THRESHOLD": "1024", "HOROVOD_CYCLE_TIME": "5"})
    assert cfg.fusion_threshold == 1024
    assert cfg.cycle_time_ms == 5.0
    assert cfg.explicit["fusion_threshold"] == "HOROVOD_FUSION_THRESHOLD"
    cfg = Config.from_env({"HOROVOD_FUSION_THRESHOLD": "1024", "FUSE_FUSION_THRESHOLD": "0"})
    assert cfg.fusion_threshold == 0
    assert cfg.explicit["fusion_threshold"] == "FUSE_FUSION_THRESHOLD"


def test_knobs_horovod_lacks_have_no_alias():
    cfg = Config.from_env({"HOROVOD_BACKEND": "mpi", "HOROVOD_INLINE_THRESHOLD": "0"})
    assert cfg.backend == "gloo"
    assert cfg.inline_threshold == 64 * 1024


@pytest.mark.parametrize("text,value", [("1", True), ("0", False), ("true", True),
                                        ("False", False), ("yes", True), ("off", False),
                                        ("2", True)])
def test_booleans(text, value):
    assert Config.from_env({"FUSE_STALL_CHECK_DISABLE": text}).stall_check_disable is value


def test_bad_values_name_the_variable():
    with pytest.raises(ValueError, match="FUSE_STALL_CHECK_DISABLE"):
        Config.from_env({"FUSE_STALL_CHECK_DISABLE": "perhaps"})
    with pytest.raises(ValueError, match="HOROVOD_CACHE_CAPACITY"):
        Config.from_env({"HOROVOD_CACHE_CAPACITY": "many"})
    with pytest.raises(ValueError, match="FUSE_LOG_LEVEL"):
        Config.from_env({"FUSE_LOG_LEVEL": "loud"})
    with pytest.raises(ValueError, match="rank 3 of size 2"):
        Config.from_env({"FUSE_RANK": "3", "FUSE_SIZE": "2"})
    with pytest.raises(ValueError, match="FUSION_THRESHOLD"):
        Config.from_env({"FUSE_FUSION_THRESHOLD": "-1"})


def test_log_level_spellings():
    assert Config.from_env({"HOROVOD_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    assert Config.from_env({"FUSE_LOG_LEVEL": "warn"}).log_level == "warning"


def test_overrides_win_and_are_recorded():
    cfg = Config.from_env({"FUSE_FUSION_THRESHOLD": "5"}, fusion_threshold=7)
    assert cfg.fusion_threshold == 7
    assert cfg.explicit["fusion_threshold"] == "argument"


@pytest.mark.parametrize("env, message", [
    ({"FUSE_SHM_THRESHOLD": "-1"},
     "FUSE_SHM_THRESHOLD=-1 is out of range: it must be from 0 to 2**40"),
    ({"FUSE_ZERO_COPY_THRESHOLD": "-1"}, "FUSE_ZERO_COPY_THRESHOLD=-1 is out of range"),
    ({"FUSE_SPLIT_THRESHOLD": "-1"}, "FUSE_SPLIT_THRESHOLD=-1 is out of range"),
    ({"FUSE_INLINE_THRESHOLD": "-1"}, "FUSE_INLINE_THRESHOLD=-1 is out of range"),
    ({"FUSE_INLINE_THRESHOLD": "1e20"}, "FUSE_INLINE_THRESHOLD=100000000000000000000 is out of"),
    ({"FUSE_GLOO_TIMEOUT_SECONDS": "0"}, "FUSE_GLOO_TIMEOUT_SECONDS=0.0 is out of range: it must "
                                         "be from 1 to 1e+07"),
    ({"HOROVOD_CYCLE_TIME": "nan"}, "HOROVOD_CYCLE_TIME=nan is out of range"),
    ({"HOROVOD_CACHE_CAPACITY": "-5"}, "HOROVOD_CACHE_CAPACITY=-5 is out of range"),
    ({"FUSE_THREAD_AFFINITY": "0,x"}, "FUSE_THREAD_AFFINITY='0,x': expected core numbers"),
    ({"FUSE_LOCAL_RANK": "2", "FUSE_LOCAL_SIZE": "2"}, "local rank 2 of 2"),
])
def test_out_of_range_values_are_refused_by_name_with_the_range(env, message):
    with pytest.raises(ValueError) as err:
        Config.from_env(env)
    assert message in str(err.value)


def test_an_argument_out_of_range_is_named_as_such():
    with pytest.raises(ValueError, match="argument fusion_threshold=-3 is out of range"):
        Config.from_env({}, fusion_threshold=-3)


@pytest.mark.parametrize("env, value", [
    ({}, "auto"), ({"FUSE_HIERARCHICAL_ALLREDUCE": "auto"}, "auto"),
    ({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}, "on"), ({"FUSE_HIERARCHICAL_ALLREDUCE": "0"}, "off"),
    ({"FUSE_HIERARCHICAL_ALLREDUCE": "true"}, "on"), ({"FUSE_HIERARCHICAL_ALLREDUCE": ""}, "auto"),
])
def test_hierarchical_allreduce_is_auto_on_or_off(env, value):
    assert Config.from_env(env).hierarchical_allreduce == value


def test_hierarchical_knobs_refuse_bad_values_by_name():
    with pytest.raises(ValueError, match="HOROVOD_HIERARCHICAL_ALLREDUCE='sometimes': expected "
                                         "1/0, true/false or auto"):
        Config.from_env({"HOROVOD_HIERARCHICAL_ALLREDUCE": "sometimes"})
    with pytest.raises(ValueError, match="FUSE_HIERARCHICAL_THRESHOLD=-1 is out of range"):
        Config.from_env({"FUSE_HIERARCHICAL_THRESHOLD": "-1"})
    with pytest.raises(ValueError, match="hierarchical_allreduce='yes please'"):
        Config.from_env({}, hierarchical_allreduce="yes please")
