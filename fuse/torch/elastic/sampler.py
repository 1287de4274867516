"""``horovod.torch.elastic.sampler``: ``ElasticSampler``, for scripts that import it from here."""

from fuse.torch.elastic import ElasticSampler  # noqa: F401

__all__ = ["ElasticSampler"]
