"""An elastic Keras 3 job: KerasState with a DistributedOptimizer (SGD with momentum, Sum over
ranks), trained by ``model.fit`` with the elastic callbacks on exact arithmetic (elastic_util).

    workers_elastic_keras.py OUT_DIR EPOCHS STEPS_PER_EPOCH [FAULT ...]

Global step ``s`` trains on batch ``s`` (elastic_util.batch_rows), each rank taking its share
of the rows; the loss sums the predictions, so the summed gradient is the batch's row sum
whatever the number of workers.  FAULTs are ``kill:generation:rank:step`` (see
workers_elastic_numpy.py).
"""

import json
import os
import signal
import sys
import time

import keras
import numpy as np

import fuse.keras as hvd
from fuse.job.state import rendezvous_generation
from elastic_util import DIM, batch_rows, wait_at_gate

out_dir, epochs, steps_per_epoch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
faults = [f.split(":") for f in sys.argv[4:]]
step_sleep = float(os.environ.get("STEP_SLEEP", "0.02"))

hvd.init()
model = keras.Sequential([keras.Input((DIM,)),
                          keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])


class SumOfPredictions(keras.losses.Loss):
    def __init__(self):
        super().__init__(reduction="sum")

    def call(self, y_true, y_pred):
        return y_pred[:, 0]


optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.125, momentum=0.5), op=hvd.Sum)
model.compile(optimizer=optimizer, loss=SumOfPredictions(), jit_compile=False)
optimizer.build(model.trainable_variables)
state = hvd.elastic.KerasState(model, batch=0, epoch=0, step=0)


class CountSteps(keras.callbacks.Callback):
    def on_batch_begin(self, batch, logs=None):
        wait_at_gate(out_dir, state, state.step)
        for kind, g, r, at in faults:
            if int(g) == rendezvous_generation() and state.step >= int(at) \
                    and int(r) == hvd.rank():
                os.kill(os.getpid(), signal.SIGKILL)

    def on_batch_end(self, batch, logs=None):
        state.step += 1
        time.sleep(step_sleep)


class Progress(keras.callbacks.Callback):
    def on_batch_end(self, batch, logs=None):
        if hvd.rank() == 0:
            with open(os.path.join(out_dir, "progress.txt"), "a") as f:
                f.write(f"{rendezvous_generation()} {hvd.size()} {state.step}\n")


def batches(first_step):
    rank, size = hvd.rank(), hvd.size()
    step = first_step
    while True:
        x = batch_rows(step)[rank::size]
        yield x, np.zeros((len(x), 1))
        step += 1


class Trace(keras.callbacks.Callback):
    """TRACE=1: say what Keras calls, for debugging."""

    def _say(self, what, *args):
        print(f"gen {rendezvous_generation()} rank {hvd.rank()} step {state.step} {what} {args}",
              file=sys.stderr, flush=True)

    def on_epoch_begin(self, epoch, logs=None):
        self._say("epoch_begin", epoch, self.params)

    def on_batch_begin(self, batch, logs=None):
        self._say("batch_begin", batch)

    def on_epoch_end(self, epoch, logs=None):
        self._say("epoch_end", epoch)


callbacks = [Trace()] * (os.environ.get("TRACE") == "1") + [
    CountSteps(), hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.CommitStateCallback(state),
    Progress()]


@hvd.elastic.run
def train(state):
    model.fit(batches(state.step), steps_per_epoch=steps_per_epoch,
              epochs=epochs - state.epoch, callbacks=callbacks, verbose=0)


train(state)
with open(os.path.join(out_dir, f"result.{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "generation": rendezvous_generation(),
               "w": model.get_weights()[0].ravel().tolist(), "step": state.step,
               "epoch": state.epoch}, f)
