"""What the MXNet intake costs: in-place allreduce of an NDArray vs the same-size NumPy array
(the engine sees the same memory either way; the difference is the NDArray wait and the
pointer lookup).  Run in the MXNet environment:

    PATH=$PWD/.venv-mxnet/bin:$PATH python bench/studies/mxnet_overhead.py

Measured here (2 workers on 2 shared cores, load average ~7 from other jobs; medians of 20):
4 B: numpy 0.11-0.18 ms, NDArray 0.30-0.38 ms; 1 MiB: 0.7-3.9 ms vs 0.9-1.3 ms; 64 MiB:
96 ms vs 128-167 ms.  The small-size cost is MXNet's WaitToWrite (it pushes a marker through
MXNet's engine and waits for a worker thread to run it) plus a few C API calls: about 75 us
measured alone.  At 64 MiB there is no copy (the engine's buffer starts at the NDArray's data
address); NumPy itself is slower on that memory too (an in-place add over 64 MiB took 12 ms on
the NDArray's memory vs 7.6 ms on a NumPy array's), which points at how the memory was
allocated (NumPy asks for transparent huge pages; MXNet's pool does not), not at fuse.
"""

import time

import fuse


def worker(sizes, repeats):
    import mxnet as mx
    import numpy as np

    import fuse as core
    import fuse.mxnet as hvd
    hvd.init()
    rows = []
    for nbytes in sizes:
        n = max(nbytes // 4, 1)
        nd = mx.nd.ones((n,))
        arr = np.ones(n, np.float32)
        def on_numpy(k, a=arr, b=nbytes):
            core.allreduce_(a, op=core.Sum, name=f"np.{b}.{k}")

        def on_ndarray(k, a=nd, b=nbytes):
            hvd.allreduce_(a, op=hvd.Sum, name=f"nd.{b}.{k}")

        for label, call in (("numpy", on_numpy), ("ndarray", on_ndarray)):
            call(-1)                                   # warm up (first negotiation)
            times = []
            for k in range(repeats):
                t0 = time.perf_counter()
                call(k)
                times.append(time.perf_counter() - t0)
            rows.append((label, nbytes, sorted(times)[len(times) // 2]))
    hvd.shutdown()
    return rows


if __name__ == "__main__":
    sizes = [4, 1 << 20, 64 << 20]
    res = fuse.run(worker, args=(sizes, 20), np=2,
                   env={**__import__("os").environ, "FUSE_BACKEND": "gloo",
                        "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"})
    print(f"{'array':8} {'bytes':>10} {'median ms':>10}")
    for label, nbytes, t in res[0]:
        print(f"{label:8} {nbytes:>10} {t * 1e3:>10.3f}")
