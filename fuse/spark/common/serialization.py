"""Spark ML persistence for the estimators and models: ``write().save(path)`` and
``Class.load(path)``, alone or as a stage of a saved ``Pipeline``/``PipelineModel``.

Spark's own metadata file (class, uid, the params that are plain JSON) is written as Spark
writes it, so a Pipeline's reader finds the class; every param's value (models, optimizers and
functions included) goes next to it, pickled with cloudpickle, as one text line (base64) that
Spark writes and reads on any filesystem it reaches.
"""

from __future__ import annotations

import base64
import json

from pyspark.ml.util import (DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader,
                             MLWritable, MLWriter)

__all__ = ["ParamsWriter", "ParamsReader", "PersistenceMixin"]

_VALUES = "fuse_params"


class ParamsWriter(MLWriter):
    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        import cloudpickle
        values = {k: v for k, v in self.instance._values_to_save().items() if v is not None}
        plain = {}
        for name, value in values.items():
            try:
                json.dumps(value)
                plain[name] = value
            except TypeError:
                pass
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sc, paramMap=plain)
        blob = base64.b64encode(cloudpickle.dumps(values)).decode("ascii")
        self.sc.parallelize([blob], 1).saveAsTextFile(f"{path.rstrip('/')}/{_VALUES}")


class ParamsReader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        import cloudpickle
        metadata = DefaultParamsReader.loadMetadata(path, self.sc)
        blob = "".join(self.sc.textFile(f"{path.rstrip('/')}/{_VALUES}").collect())
        instance = self.cls()
        values = instance._values_loaded(cloudpickle.loads(base64.b64decode(blob)))
        instance._set(**values)
        instance._resetUid(metadata["uid"])
        return instance


class PersistenceMixin(MLWritable, MLReadable):
    """``write()``/``read()``/``save()``/``load()`` as Spark ML's MLWritable and MLReadable."""

    def _values_to_save(self) -> dict:
        """The params' values as they are saved (a framework may turn a model into bytes)."""
        return self.param_values()

    def _values_loaded(self, values: dict) -> dict:
        """The saved values back as the params take them."""
        return values

    def write(self):
        return ParamsWriter(self)

    def save(self, path: str) -> None:
        self.write().save(path)

    @classmethod
    def read(cls):
        return ParamsReader(cls)

    @classmethod
    def load(cls, path: str):
        return cls.read().load(path)
