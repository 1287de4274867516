"""The collectives written once for every framework (:mod:`calls`), the reduce ops, the tensor
verbs a framework supplies (:mod:`array_ops`), Adasum, compression and the gradient bookkeeping
the optimizers share."""
