"""fuse.lightning with the real Lightning: a fit on 2 fuserun workers (strategy="fuse") trains
to the weights of one plain Lightning process given the combined batch, with rank-0-only
checkpoints and the strategy's collectives (workers_lightning_training.py is the script)."""

import json
import os
import subprocess
import sys

import needs
import pytest
from paths_util import support

needs.module("torch")
needs.module("lightning.pytorch", "lightning")

pytestmark = pytest.mark.timeout(300)
SCRIPT = support("workers_lightning_training.py")


def _env():
    # no outer job's identity, and no Lightning/torch.distributed variables leaking in
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("FUSE_", "HOROVOD_", "PL_", "LOCAL_RANK", "WORLD_SIZE"))}


def _run(cmd, tmp_path):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env(),
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_two_workers_train_like_one_process_with_the_combined_batch(tmp_path):
    fuse_dir, single_dir = tmp_path / "fuse", tmp_path / "single"
    fuse_dir.mkdir()
    single_dir.mkdir()
    out = str(tmp_path / "result")
    _run([sys.executable, "-m", "fuse.runner.launch", "-np", "2", sys.executable, SCRIPT,
          "fuse", out, str(fuse_dir)], tmp_path)
    _run([sys.executable, SCRIPT, "single", out + ".single", str(single_dir)], tmp_path)
    ranks = [json.load(open(f"{out}.{r}")) for r in range(2)]
    single = json.load(open(out + ".single"))

    assert [r["strategy"] for r in ranks] == ["FuseStrategy"] * 2
    assert [r["pytorch_lightning"] for r in ranks] == [
        ["fuse.lightning.pytorch_lightning", rank, 2] for rank in range(2)]
    assert [(r["rank"], r["world_size"], r["rank_zero_only"]) for r in ranks] == [(0, 2, 0),
                                                                                 (1, 2, 1)]
    assert ranks[0]["steps"] == ranks[1]["steps"] == single["steps"] == 8
    assert ranks[0]["weights"] == ranks[1]["weights"], "the replicas diverged"
    for mine, theirs in zip(ranks[0]["weights"], single["weights"]):
        assert mine == pytest.approx(theirs, rel=1e-5, abs=1e-6), \
            "2 workers trained to other weights than one process with the combined batch"
    # the learning rate was scaled by the number of workers, as HorovodStrategy did
    assert ranks[0]["lr"] == ranks[1]["lr"] == single["lr"]
    # the logged loss was averaged over the workers (sync_dist) to the single run's
    assert ranks[0]["loss"] == ranks[1]["loss"] == pytest.approx(single["loss"], rel=1e-5)
    # all_gather stacks every worker's tensor; broadcast hands out rank 1's object
    assert all(r["gathered"] == [[0, 7], [1, 7]] for r in ranks)
    assert all(r["broadcast"] == "from rank 1" for r in ranks)
    # checkpoints: one per epoch end (the last one kept), written by rank 0 only
    saves = [line.split(maxsplit=1) for line in (fuse_dir / "saves").read_text().splitlines()]
    assert [rank for rank, _ in saves] == ["0", "0"], saves
    assert os.path.exists(saves[-1][1]), saves


def test_reduce_op_spellings_map_to_fuse_ops():
    torch = needs.module("torch")
    import fuse.torch as hvd
    from fuse.lightning.strategy import fuse_op

    assert fuse_op(None) is hvd.Average and fuse_op("mean") is hvd.Average
    assert fuse_op("sum") is hvd.Sum and fuse_op("MAX") is hvd.Max
    if torch.distributed.is_available():      # Lightning's ReduceOp is torch.distributed's
        assert fuse_op(torch.distributed.ReduceOp.SUM) is hvd.Sum
        assert fuse_op(torch.distributed.ReduceOp.MIN) is hvd.Min
    with pytest.raises(ValueError, match="reduce_op='median' is not supported"):
        fuse_op("median")


def test_sharded_strategy_trains_like_the_unsharded_one_and_checkpoints_the_full_state(tmp_path):
    """FuseStrategy(sharded=True) on 2 workers (AdamW, accumulation, norm clipping) ends within
    1e-5 of FuseStrategy(); its checkpoint holds the optimizer state of every parameter, as the
    unsharded one's does, while each worker held the state of its own parameters only."""
    out = str(tmp_path / "result")
    _run([sys.executable, "-m", "fuse.runner.launch", "-np", "2", sys.executable,
          support("workers_lightning_sharded.py"), out, str(tmp_path)], tmp_path)
    ranks = [json.load(open(f"{out}.{r}")) for r in range(2)]
    for res in ranks:
        sharded, plain = res["sharded"], res["plain"]
        for mine, theirs in zip(sharded["weights"], plain["weights"]):
            assert mine == pytest.approx(theirs, rel=1e-5, abs=1e-6), \
                "the sharded run trained to other weights than the unsharded one"
        params = plain["checkpoint_param_keys"]
        assert len(params) == 6
        assert plain["checkpoint_state_keys"] == params
        assert sharded["checkpoint_state_keys"] == params, "the checkpoint lacks some state"
        assert sharded["checkpoint_state_kinds"] == plain["checkpoint_state_kinds"] == [
            "exp_avg", "exp_avg_sq", "step"]
        assert plain["held_states"] == 6
    # the 6 parameters' state was split between the workers, none held twice; the 8x8
    # weight, 53 % of the bytes, split into a block per worker
    held = [r["sharded"]["held_states"] for r in ranks]
    assert sum(held) == 6 + 1 and min(held) > 1, held
