"""The job this process takes part in, as the layers above read it: the running engine and its
configuration (:mod:`state`), the registered process sets (:mod:`process_sets`) and the GPU
path's executor (:mod:`device_path`).  ``fuse.worker.lifecycle`` writes it; the collectives and
the frameworks read it.  Imports nothing above the engine."""
