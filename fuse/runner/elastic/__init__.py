"""Elastic jobs: the launcher's side (``fuserun --min-np/--max-np/--host-discovery-script``).

* :mod:`fuse.cluster.elastic_protocol`  the store keys the driver and the workers agree on (both
  sides import it, so it lives below both)
* :mod:`.discovery` where hosts come from: a fixed ``-H`` list or a discovery script
* :mod:`.blacklist` hosts whose workers failed, and when they may come back
* :mod:`.plan`      who runs where in one generation: ranks, local and cross ranks
* :mod:`.driver`    the loop that starts workers, watches them and re-forms the job
"""
