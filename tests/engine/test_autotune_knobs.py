"""Autotune pieces that need no job: knobs, the search mapping, the missing-library message."""

from __future__ import annotations

import sys

import pytest

from fuse.engine import autotune
from fuse.config import Config


def test_autotune_knobs_and_aliases():
    cfg = Config.from_env({})
    assert (cfg.autotune, cfg.autotune_warmup_samples, cfg.autotune_steps_per_sample,
            cfg.autotune_bayes_opt_max_samples, cfg.autotune_gaussian_process_noise) == (
        False, 3, 10, 20, 0.8)
    cfg = Config.from_env({"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
                           "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "4",
                           "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "7",
                           "FUSE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.1"})
    assert (cfg.autotune, cfg.autotune_warmup_samples, cfg.autotune_steps_per_sample,
            cfg.autotune_bayes_opt_max_samples, cfg.autotune_gaussian_process_noise) == (
        True, 0, 4, 7, 0.1)
    with pytest.raises(ValueError, match="NOISE"):
        Config.from_env({"FUSE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "1.5"})
    with pytest.raises(ValueError, match="STEPS_PER_SAMPLE"):
        Config.from_env({"FUSE_AUTOTUNE_STEPS_PER_SAMPLE": "0"})


def test_fusion_search_maps_to_0_through_64_mib():
    assert autotune.fusion_from_log2(autotune.FUSION_LOG2_OFF) == 0
    assert autotune.fusion_from_log2(autotune.FUSION_LOG2_MIN) == 16 * 1024
    assert autotune.fusion_from_log2(autotune.FUSION_LOG2_MAX) == 64 * 1024 * 1024


def test_missing_library_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r"fuse-dl\[autotune\]"):
        autotune.require_library()


def test_explicit_knobs_are_fixed():
    cfg = Config.from_env({"FUSE_AUTOTUNE": "1", "HOROVOD_CYCLE_TIME": "2.5"})
    tuner = autotune.Autotuner(engine=None, config=cfg, log=None)
    assert tuner.fixed == {"cycle_time_ms": 2.5}
    cfg = Config.from_env({"FUSE_AUTOTUNE": "1"}, cache_capacity=0)
    assert autotune.Autotuner(None, cfg, None).fixed == {"cache_enabled": False}
