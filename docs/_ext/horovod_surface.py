"""Horovod 0.28.1's launcher flags and environment variables, as its documentation lists them,
with what fuse does with each where that is not "the same".  The migration page's tables are
made from this list against fuse's own parser and configuration (fuse_reference.py), so a flag
or variable fuse drops, or one this list does not explain, fails the docs build."""

# horovodrun's flags, one spelling each (fuserun must accept every one).
HOROVODRUN_FLAGS = [
    "--version", "--num-proc", "--check-build", "--disable-cache", "--start-timeout",
    "--network-interfaces", "--network-interface", "--output-filename", "--verbose",
    "--config-file", "--ssh-port", "--ssh-identity-file", "--fusion-threshold-mb",
    "--cycle-time-ms", "--cache-capacity", "--hierarchical-allreduce",
    "--no-hierarchical-allreduce", "--hierarchical-allgather", "--no-hierarchical-allgather",
    "--torus-allreduce", "--no-torus-allreduce", "--autotune", "--autotune-log-file",
    "--autotune-warmup-samples", "--autotune-steps-per-sample",
    "--autotune-bayes-opt-max-samples", "--autotune-gaussian-process-noise", "--min-np",
    "--max-np", "--slots-per-host", "--elastic-timeout", "--reset-limit",
    "--blacklist-cooldown-range", "--timeline-filename", "--timeline-mark-cycles",
    "--no-stall-check", "--stall-check-warning-time-seconds",
    "--stall-check-shutdown-time-seconds", "--mpi-threads-disable", "--mpi-args", "--tcp",
    "--binding-args", "--num-nccl-streams", "--thread-affinity", "--gloo-timeout-seconds",
    "--log-level", "--log-without-timestamp", "--prefix-output-with-timestamp", "--hosts",
    "--hostfile", "--host-discovery-script", "--gloo", "--mpi", "--jsrun",
]

# Where fuserun's behaviour differs from horovodrun's for a flag it accepts.
FLAG_DIFFERENCES = {
    "--disable-cache": "accepted; fuserun keeps no cache of ssh and NIC checks",
    "--torus-allreduce": "accepted and ignored (no torus allreduce)",
    "--no-torus-allreduce": "accepted and ignored",
    "--num-nccl-streams": "accepted and ignored (one NCCL stream)",
    "--tcp": "sets NCCL_IB_DISABLE=1 only",
    "--jsrun": "refused with a usage error: no LSF/jsrun launch",
    "--hierarchical-allreduce": "works on any backend, through shared memory inside each host; "
                                "without the flag fuse chooses by size (Horovod: off)",
    "--no-hierarchical-allreduce": "keeps the flat ring",
    "--hierarchical-allgather": "as --hierarchical-allreduce",
    "--mpi": "hands the launch to mpirun (Open MPI's root variables set for you)",
    "--gloo": "the default launcher",
    "--autotune": "tunes fusion threshold, cycle time and cache (not hierarchical/torus)",
}

# Horovod's environment variables (workers and launcher).
HOROVOD_ENV = [
    "FUSION_THRESHOLD", "CYCLE_TIME", "CACHE_CAPACITY", "HIERARCHICAL_ALLREDUCE",
    "HIERARCHICAL_ALLGATHER", "TORUS_ALLREDUCE", "TIMELINE", "TIMELINE_MARK_CYCLES", "AUTOTUNE",
    "AUTOTUNE_LOG", "AUTOTUNE_WARMUP_SAMPLES", "AUTOTUNE_STEPS_PER_SAMPLE",
    "AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "STALL_CHECK_DISABLE",
    "STALL_CHECK_TIME_SECONDS", "STALL_SHUTDOWN_TIME_SECONDS", "MPI_THREADS_DISABLE",
    "NUM_NCCL_STREAMS", "THREAD_AFFINITY", "BATCH_D2D_MEMCOPIES", "DISABLE_GROUP_FUSION",
    "ENABLE_ASYNC_COMPLETION", "DISABLE_NVTX_RANGES", "DYNAMIC_PROCESS_SETS", "ENABLE_XLA_OPS",
    "ADASUM_MPI_CHUNK_SIZE", "CPU_OPERATIONS", "CONTROLLER", "CCL_CACHE", "GLOO_IFACE",
    "GLOO_TIMEOUT_SECONDS", "GLOO_RENDEZVOUS_ADDR", "GLOO_RENDEZVOUS_PORT", "HOSTNAME", "RANK",
    "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "ELASTIC", "LOG_LEVEL",
    "LOG_HIDE_TIME", "START_TIMEOUT", "ELASTIC_TIMEOUT", "SPARK_START_TIMEOUT",
    "SPARK_WORK_DIR", "SPARK_PYTHONPATH", "SPARK_USE_LOCAL_RANK_GPU_INDEX",
]

# Variables fuse neither reads as an alias nor lists as ignored, and why.
ENV_NOTES = {
    "CPU_OPERATIONS": "read as a fallback for FUSE_BACKEND (gloo or mpi)",
    "CONTROLLER": "not needed: fuse negotiates over its own control channel whatever the backend",
}

# Where a variable fuse reads behaves differently from Horovod's.
ENV_DIFFERENCES = {
    "HIERARCHICAL_ALLREDUCE": "unset means automatic (by size); any backend, not NCCL only",
    "HIERARCHICAL_ALLGATHER": "unset means automatic (by size)",
    "STALL_SHUTDOWN_TIME_SECONDS": "also bounds how long workers wait for a silent rank 0",
    "AUTOTUNE": "tunes fusion threshold, cycle time and cache",
    "AUTOTUNE_LOG": "columns cycle_time_ms, fusion_threshold, cache_enabled, score",
    "TIMELINE": "start_timeline() works without DYNAMIC",
    "MPI_THREADS_DISABLE": "MPI_THREAD_SERIALIZED (Horovod: MPI_THREAD_SINGLE)",
}

# Horovod's public names per framework module (the basics are in every one of them).
BASICS = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size",
    "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "gloo_enabled", "mpi_built", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "Average", "Sum",
    "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
]
HOROVOD_API = {
    "torch": BASICS + [
        "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "grouped_allreduce",
        "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
        "sparse_allreduce_async", "allgather", "allgather_async", "grouped_allgather",
        "grouped_allgather_async", "broadcast", "broadcast_async", "broadcast_",
        "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
        "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join", "poll",
        "synchronize", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
        "allgather_object", "DistributedOptimizer", "SyncBatchNorm", "Compression",
        "HorovodInternalError", "elastic"],
    "tensorflow": BASICS + [
        "allreduce", "grouped_allreduce", "reducescatter", "grouped_reducescatter", "allgather",
        "grouped_allgather", "broadcast", "broadcast_", "alltoall", "join", "broadcast_variables",
        "broadcast_global_variables", "BroadcastGlobalVariablesHook", "broadcast_object",
        "broadcast_object_fn", "allgather_object", "DistributedOptimizer",
        "DistributedGradientTape", "PartialDistributedGradientTape", "SyncBatchNormalization",
        "size_op", "local_size_op", "rank_op", "local_rank_op", "process_set_included_op",
        "Compression", "elastic"],
    "tensorflow.keras": [
        "init", "shutdown", "size", "rank", "local_rank", "local_size", "Average", "Sum",
        "global_process_set", "Compression", "DistributedOptimizer",
        "PartialDistributedOptimizer", "allreduce", "allgather", "broadcast", "reducescatter",
        "broadcast_global_variables", "load_model", "callbacks", "elastic"],
    "mxnet": BASICS + [
        "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather",
        "grouped_allgather", "broadcast", "broadcast_", "alltoall", "reducescatter",
        "grouped_reducescatter", "broadcast_object", "allgather_object", "broadcast_parameters",
        "DistributedOptimizer", "DistributedTrainer", "Compression"],
}

# Where a name fuse has behaves differently from Horovod's (module, name) -> difference.
API_DIFFERENCES = {
    ("torch", "DistributedOptimizer"): "ready gradients queued together (FUSE_GRAD_BATCH_BYTES), "
                                       "each its own allreduce; Compression.powersgd added",
    ("torch", "broadcast_optimizer_state"): "no step on zero gradients to create the state",
    ("torch", "Compression"): "also bf16 and powersgd",
    ("torch", "alltoall"): "returns (output, received_splits) when splits is given",
    ("torch", "elastic"): "the same; MXNet has one too (fuse.mxnet.elastic)",
    ("tensorflow", "DistributedOptimizer"): "tf.compat.v1.train optimizers not supported",
    ("tensorflow", "allreduce"): "XLA (jit_compile) refused with XlaNotSupportedError",
    ("tensorflow", "Compression"): "also bf16",
    ("tensorflow", "SyncBatchNormalization"): "a Keras 3 layer; fused=False accepted",
    ("tensorflow.keras", "DistributedOptimizer"): "Keras 3 optimizers; op=Adasum refused",
    ("tensorflow.keras", "callbacks"): "momentum_correction accepted, no effect (Keras 3); "
                                       "BestModelCheckpoint takes a filepath",
    ("mxnet", "allreduce"): "returns when the result is written; priority ignored; CPU only",
    ("mxnet", "alltoall"): "returns (output, received_splits) when splits is given",
    ("mxnet", "DistributedTrainer"): "CPU NDArrays only; row_sparse gradients refused",
}

# Names fuse does not have, and why.
API_ABSENT = {
    ("tensorflow", "BroadcastGlobalVariablesHook"): "not there: TF1 session hooks are not "
                                                    "supported; use broadcast_variables",
}
