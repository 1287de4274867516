"""Autotune: online Bayesian optimisation of the fusion threshold, the cycle time and the
response cache switch (``FUSE_AUTOTUNE=1``).

Only the coordinator (rank 0) fuses, holds ready tensors for the cycle time and assigns cache
slots, so only its values matter: the tuner runs as a thread on rank 0 and hands each setting
to the coordinator through its one interface for them, ``Engine.tuning`` (a
:class:`fuse.engine.coordinator.Tuning`); the engine thread takes it at the start of its next
coordinator step.  Every rank executes the responses the coordinator built, so all ranks run
with the same values by construction.

A sample is the allreduced bytes per microsecond of wall time over a window of at least
``FUSE_AUTOTUNE_STEPS_PER_SAMPLE`` coordinator cycles that emitted responses and at least
``MIN_SAMPLE_SECONDS``.  The first ``FUSE_AUTOTUNE_WARMUP_SAMPLES`` samples (with the initial
values) are discarded.  Then ``FUSE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES`` samples are scored: the
first with the setting in force when tuning starts, each further one with a setting proposed by
optuna's Gaussian-process sampler; afterwards the best-scoring setting (possibly the starting
one) is fixed and sampling stops.  Knobs the user set explicitly are not searched.
"""

from __future__ import annotations

import math
import threading
import time

MIN_SAMPLE_SECONDS = 0.2
POLL_SECONDS = 0.005
# fusion threshold search: log2(MiB) in [FUSION_LOG2_OFF, 6]; below FUSION_LOG2_MIN means off
FUSION_LOG2_OFF = -7.0
FUSION_LOG2_MIN = -6.0          # 16 KiB
FUSION_LOG2_MAX = 6.0           # 64 MiB
CYCLE_TIME_MAX_MS = 20.0
LOG_COLUMNS = "cycle_time_ms,fusion_threshold,cache_enabled,score"


def require_library():
    """Import the optimiser, or fail with a message that says how to get it."""
    try:
        import optuna  # noqa: F401
        from optuna.samplers import GPSampler  # noqa: F401
        import scipy  # noqa: F401  (GPSampler needs scipy and torch)
        import torch  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "FUSE_AUTOTUNE=1 needs optuna (>= 3.6, with scipy and torch) for its Bayesian "
            f"optimisation: pip install 'fuse-dl[autotune]' ({err})") from err


def fusion_from_log2(x: float) -> int:
    if x < FUSION_LOG2_MIN:
        return 0
    return int(round(2.0 ** x * 1024 * 1024))


class Autotuner(threading.Thread):
    def __init__(self, engine, config, log):
        super().__init__(name="fuse-autotune", daemon=True)
        self._engine = engine
        self._log = log
        self._halt = threading.Event()
        self._mu = threading.Lock()
        self._warmup = config.autotune_warmup_samples
        self._steps = config.autotune_steps_per_sample
        self._max = config.autotune_bayes_opt_max_samples
        self._noise = config.autotune_gaussian_process_noise
        self._path = config.autotune_log
        explicit = config.explicit
        self.fixed = {}
        if "fusion_threshold" in explicit:
            self.fixed["fusion_threshold"] = config.fusion_threshold
        if "cycle_time_ms" in explicit:
            self.fixed["cycle_time_ms"] = config.cycle_time_ms
        if "cache_capacity" in explicit or config.cache_capacity == 0:
            self.fixed["cache_enabled"] = config.cache_capacity > 0
        self._current = {"fusion_threshold": config.fusion_threshold,
                         "cycle_time_ms": float(config.cycle_time_ms),
                         "cache_enabled": config.cache_capacity > 0}
        self._samples = 0
        self._done = threading.Event()
        self._best = None
        self.error = None

    # -- state for fuse.autotune_state()

    def state(self) -> dict:
        with self._mu:
            out = dict(self._current)
            out.update(done=self._done.is_set(), samples=self._samples,
                       best_score=None if self._best is None else self._best,
                       fixed=sorted(self.fixed))
        return out

    def wait(self, timeout=None) -> bool:
        return self._done.wait(timeout)

    def stop(self):
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    # -- the tuning thread

    def _apply(self, values: dict):
        with self._mu:
            self._current = dict(values)
        self._engine.tuning.set(int(values["fusion_threshold"]), float(values["cycle_time_ms"]),
                                bool(values["cache_enabled"]))

    def _measure(self):
        """One sample: allreduced bytes per µs, or None when asked to stop."""
        engine = self._engine
        s0 = engine.stats()
        t0 = time.perf_counter()
        while not self._halt.wait(POLL_SECONDS):
            s = engine.stats()
            elapsed = time.perf_counter() - t0
            if s["cycles"] - s0["cycles"] >= self._steps and elapsed >= MIN_SAMPLE_SECONDS:
                return (s["bytes"] - s0["bytes"]) / (elapsed * 1e6)
        return None

    def _suggest(self, trial) -> dict:
        values = dict(self._current)
        if "fusion_threshold" not in self.fixed:
            values["fusion_threshold"] = fusion_from_log2(
                trial.suggest_float("fusion_log2_mib", FUSION_LOG2_OFF, FUSION_LOG2_MAX))
        if "cycle_time_ms" not in self.fixed:
            values["cycle_time_ms"] = trial.suggest_float("cycle_time_ms", 0.0,
                                                          CYCLE_TIME_MAX_MS)
        if "cache_enabled" not in self.fixed:
            values["cache_enabled"] = trial.suggest_categorical("cache_enabled", [True, False])
        values.update(self.fixed)
        return values

    def _write(self, out, values: dict, score: float):
        if out is None:
            return
        out.write(f"{values['cycle_time_ms']:.4f},{int(values['fusion_threshold'])},"
                  f"{int(bool(values['cache_enabled']))},{score:.6f}\n")
        out.flush()

    def run(self):
        out = None
        try:
            if self._path:
                out = open(self._path, "w")
                out.write(LOG_COLUMNS + "\n")
                out.flush()
            self._tune(out)
        except Exception as err:     # the job goes on with the values in force
            self.error = err
            self._log.error("autotune stopped: %s", err)
        finally:
            if out is not None:
                out.close()
            self._done.set()

    def _tune(self, out):
        import warnings

        import optuna
        from optuna.samplers import GPSampler

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        self._apply(self._current)
        for _ in range(self._warmup):
            if self._measure() is None:
                return
        if len(self.fixed) == 3:
            self._log.info("autotune: every knob is set explicitly; nothing to tune")
            return
        # optuna's GP fits its own noise term; FUSE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE == 0 tells it
        # the score is noiseless, any other value lets it estimate the noise.
        sampler = GPSampler(seed=0, n_startup_trials=max(1, min(10, self._max // 3)),
                            deterministic_objective=self._noise == 0.0)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        best_values, best_score = dict(self._current), -math.inf
        for i in range(self._max):
            # The first sample scores the setting in force (the defaults, or the user's), so the
            # tuner leaves it only for a setting that scored better.  (Not told to the study:
            # the default fusion threshold, 128 MiB, lies outside the searched range.)
            trial = study.ask() if i else None
            values = self._suggest(trial) if i else dict(self._current)
            self._apply(values)
            score = self._measure()
            if score is None:
                return
            if trial is not None:
                study.tell(trial, score)
            self._write(out, values, score)
            if score > best_score:
                best_values, best_score = values, score
            with self._mu:
                self._samples += 1
                self._best = best_score
        self._apply(best_values)
        self._log.info("autotune done: fusion threshold %d, cycle time %.3f ms, cache %s "
                       "(%.1f bytes/us)", best_values["fusion_threshold"],
                       best_values["cycle_time_ms"], best_values["cache_enabled"], best_score)
