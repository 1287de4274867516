"""Every collective but allreduce, and the grouped forms, 4 B .. 256 MiB: fuse.torch against
torch.distributed (gloo), same job, on the world or on a process set of 2 of the ranks.

    fuserun -np 2 python bench/suite/collectives.py [--json out.json]
    fuserun -np 4 python bench/suite/collectives.py --process-set 0,2 [--json out.json]

What each side does, on float32 zeros (a size is the bytes each member ends up holding, or the
bytes it sends where that is larger; N members):

  allgather          each member sends size/N; fuse ``allgather`` against
                     ``all_gather_into_tensor``
  broadcast          size from the set's first rank, in place: ``broadcast_`` / ``broadcast``
  alltoall           size in, size out, equal splits: ``alltoall`` / ``all_to_all_single``
  reducescatter      size in, size/N out, sum: ``reducescatter`` / ``reduce_scatter_tensor``
                     (where torch's gloo has no reduce-scatter: ``all_reduce`` of the whole
                     and the member's slice, what a torch user on gloo does)
  grouped_allreduce  4 tensors of size/4, sum, in place: ``grouped_allreduce_`` / 4 async
                     ``all_reduce`` then 4 waits
  grouped_allgather  4 tensors, each member sending size/4/N of each: ``grouped_allgather`` /
                     4 async ``all_gather_into_tensor`` then 4 waits

Timing as bench/suite/allreduce.py's ``sweep``: a warm-up pass, rounds outermost, sides
alternating, a barrier before each measurement, the median call per round, the median over
rounds.  With ``--process-set`` the ranks outside the set take part in the barriers only.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce  # noqa: E402
import common  # noqa: E402
import machine  # noqa: E402

OPS = ("allgather", "broadcast", "alltoall", "reducescatter", "grouped_allreduce",
       "grouped_allgather")
GROUP = 4          # tensors in a grouped call


def torch_has_reduce_scatter(dist, group) -> bool:
    """Whether this torch's gloo process group implements reduce_scatter_tensor."""
    import torch
    n = dist.get_world_size(group)
    try:
        dist.reduce_scatter_tensor(torch.zeros(1), torch.zeros(n), group=group)
        return True
    except (RuntimeError, NotImplementedError, ValueError):
        return False


def side_pairs(hvd, dist, pset, group, members: list[int], name: str):
    """{op: make(n_elements) -> {"fuse": fn, "torch.distributed": fn}} for this rank, a member
    of the set; ``n_elements`` is the size in float32 values."""
    import torch
    n_members = len(members)
    me = members.index(hvd.rank())
    root = members[0]
    native_rs = torch_has_reduce_scatter(dist, group)

    def per_member(n):            # elements each member contributes, at least one
        return max(1, n // n_members)

    def allgather(n):
        a, t = torch.zeros(per_member(n)), torch.zeros(per_member(n))
        out = torch.zeros(per_member(n) * n_members)
        return {"fuse": lambda: hvd.allgather(a, name=f"{name}.ag.{n}", process_set=pset),
                "torch.distributed": lambda: dist.all_gather_into_tensor(out, t, group=group)}

    def broadcast(n):
        a, t = torch.zeros(n), torch.zeros(n)
        return {"fuse": lambda: hvd.broadcast_(a, root, name=f"{name}.bc.{n}", process_set=pset),
                "torch.distributed": lambda: dist.broadcast(t, root, group=group)}

    def alltoall(n):
        m = per_member(n) * n_members
        a, t, out = torch.zeros(m), torch.zeros(m), torch.zeros(m)
        return {"fuse": lambda: hvd.alltoall(a, name=f"{name}.a2a.{n}", process_set=pset),
                "torch.distributed": lambda: dist.all_to_all_single(out, t, group=group)}

    def reducescatter(n):
        m = per_member(n)
        a, t, out = torch.zeros(m * n_members), torch.zeros(m * n_members), torch.zeros(m)
        if native_rs:
            def theirs():
                dist.reduce_scatter_tensor(out, t, group=group)
        else:
            def theirs():
                dist.all_reduce(t, group=group)
                out.copy_(t[me * m:(me + 1) * m])
        return {"fuse": lambda: hvd.reducescatter(a, name=f"{name}.rs.{n}", op=hvd.Sum,
                                                  process_set=pset),
                "torch.distributed": theirs}

    def grouped_allreduce(n):
        m = max(1, n // GROUP)
        ours = [torch.zeros(m) for _ in range(GROUP)]
        theirs_t = [torch.zeros(m) for _ in range(GROUP)]

        def theirs():
            for w in [dist.all_reduce(t, group=group, async_op=True) for t in theirs_t]:
                w.wait()
        return {"fuse": lambda: hvd.grouped_allreduce_(ours, name=f"{name}.gar.{n}",
                                                       op=hvd.Sum, process_set=pset),
                "torch.distributed": theirs}

    def grouped_allgather(n):
        m = max(1, n // GROUP // n_members)
        ours = [torch.zeros(m) for _ in range(GROUP)]
        theirs_in = [torch.zeros(m) for _ in range(GROUP)]
        theirs_out = [torch.zeros(m * n_members) for _ in range(GROUP)]

        def theirs():
            works = [dist.all_gather_into_tensor(o, i, group=group, async_op=True)
                     for o, i in zip(theirs_out, theirs_in)]
            for w in works:
                w.wait()
        return {"fuse": lambda: hvd.grouped_allgather(ours, name=f"{name}.gag.{n}",
                                                      process_set=pset),
                "torch.distributed": theirs}

    makers = {"allgather": allgather, "broadcast": broadcast, "alltoall": alltoall,
              "reducescatter": reducescatter, "grouped_allreduce": grouped_allreduce,
              "grouped_allgather": grouped_allgather}
    return makers, native_rs


def idle_sides(n):
    """What a rank outside the process set times: nothing (it joins the barriers only)."""
    return {"fuse": lambda: None, "torch.distributed": lambda: None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=allreduce.parse_sizes,
                    default=allreduce.parse_sizes("4,4K,1M,64M,256M"))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-calls", type=int, default=100)
    ap.add_argument("--process-set", default=None,
                    help="comma-separated ranks of a process set to measure instead of the world")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import fuse.torch as hvd
    members = sorted(int(r) for r in args.process_set.split(",")) if args.process_set else None
    # the set is registered at init, as a Horovod script does (adding it later would need
    # dynamic process sets)
    pset = hvd.ProcessSet(members) if members else None
    hvd.init(process_sets=[pset] if pset else None)
    torch.set_num_threads(1)
    port = hvd.broadcast_object(common.free_port() if hvd.rank() == 0 else None, 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=hvd.rank(), world_size=hvd.size())
    if members:
        group = dist.new_group(members)
        where = f"process set {members} of {hvd.size()}"
    else:
        members = list(range(hvd.size()))
        pset, group, where = hvd.global_process_set, None, f"world of {hvd.size()}"
    inside = hvd.rank() in members
    makers, native_rs = (side_pairs(hvd, dist, pset, group, members, "coll") if inside
                         else ({op: idle_sides for op in OPS}, None))
    rows = []
    for op in args.ops.split(","):
        op_rows = allreduce.sweep(args.sizes, args.rounds, makers[op], hvd.barrier,
                                  args.max_calls, what=op)
        if hvd.rank() == members[0]:
            allreduce.print_rows(op_rows, f"{op}: fuse.torch vs torch.distributed (gloo), "
                                          f"{where}, {args.rounds} rounds, medians")
        rows += op_rows
    if hvd.rank() == members[0]:
        common.write_json(args.json, common.job_record(
            f"collectives_{hvd.size()}_{'pset' if args.process_set else 'world'}", rows,
            machine.describe(), vars(args) | {"workers": hvd.size(), "members": members,
                                              "torch_reduce_scatter": native_rs}))
    dist.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
