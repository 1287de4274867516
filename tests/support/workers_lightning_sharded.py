"""``FuseStrategy(sharded=True)`` against ``FuseStrategy()`` in one fuserun job:

    fuserun -np 2 python workers_lightning_sharded.py OUT DIR

The same Lightning fit (AdamW, gradient accumulation, norm clipping, a checkpoint at each
epoch's end) runs twice in the same workers, sharded and not; each rank writes to OUT.<rank>
both runs' final weights and what their last checkpoint holds as optimizer state (its
parameter keys), and the number of parameters the sharded optimizer holds state for on this
rank."""

import json
import os
import sys

import torch
import lightning.pytorch as pl

from fuse.lightning import FuseStrategy

BATCH = 4


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                         torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                         torch.nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(64, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def fit(sharded: bool, workdir: str) -> dict:
    model = Regression()
    trainer = pl.Trainer(strategy=FuseStrategy(sharded=sharded), accelerator="cpu", devices=1,
                         max_epochs=2, accumulate_grad_batches=2, gradient_clip_val=0.5,
                         default_root_dir=workdir, logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, torch.utils.data.DataLoader(data(), batch_size=BATCH))
    held = len(trainer.strategy.optimizers[0].state)    # before teardown, still wrapped
    path = trainer.checkpoint_callback.best_model_path
    trainer.strategy.barrier()          # rank 0 has written the checkpoint
    saved = torch.load(path, weights_only=False)["optimizer_states"][0]
    return {"weights": [p.detach().flatten().tolist() for p in model.parameters()],
            "checkpoint_state_keys": sorted(saved["state"]),
            "checkpoint_param_keys": [k for g in saved["param_groups"] for k in g["params"]],
            "checkpoint_state_kinds": sorted({k for s in saved["state"].values() for k in s}),
            "held_states": held, "rank": trainer.global_rank}


def main(out, workdir):
    result = {name: fit(name == "sharded", os.path.join(workdir, name))
              for name in ("sharded", "plain")}
    with open(f"{out}.{result['plain']['rank']}", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
