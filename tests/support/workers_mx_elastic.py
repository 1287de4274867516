"""An elastic MXNet job: MXNetState with a Gluon Dense layer, a DistributedTrainer (SGD with
momentum) and an ElasticSampler; the counterpart of tests/support/workers_elastic_torch.py.

    workers_mx_elastic.py OUT_DIR EPOCHS [FAULT ...]

The loop, the faults (``kill``, ``raise``) and the result are tests/support/workers_elastic_sampled.py's.
"""

import mxnet as mx

import fuse.mxnet as hvd
from elastic_util import DIM, SAMPLES, sampled_data
from workers_elastic_sampled import Job

job = Job()
data = mx.nd.array(sampled_data(), dtype="float64")

hvd.init()
model = mx.gluon.nn.Dense(1, use_bias=False, in_units=DIM, dtype="float64")
model.initialize(mx.init.Zero())
trainer = hvd.DistributedTrainer(model.collect_params(),
                                 mx.optimizer.SGD(learning_rate=0.125, momentum=0.5))
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
state = hvd.elastic.MXNetState(model, trainer, sampler=sampler, epoch=0, log=[])


def step(idx: list, committed: int) -> None:
    with mx.autograd.record():
        loss = model(data[mx.nd.array(idx)]).sum()
    loss.backward()
    job.maybe_fail(hvd.rank(), committed)
    # the trainer averages over the workers; 1/size undoes the average, so a step applies
    # the sum of every worker's rows whatever the number of workers
    trainer.step(1.0 / hvd.size())


job.train(hvd, state, step)
job.write_result(hvd, state, model.weight.data().asnumpy().ravel().tolist())
