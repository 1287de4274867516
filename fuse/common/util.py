"""``horovod.common.util``: the helpers Horovod scripts and test suites reach for.

fuse builds no extension per framework, so the extension checks answer from what is installed
and the version check has nothing to compare against.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from typing import Iterator

from fuse.worker.lifecycle import (ccl_built, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                mpi_built, nccl_built, rocm_built, sycl_built)
from fuse.collectives.ops import resolve_op


def get_average_backwards_compatibility_fun(reduce_ops: dict):
    """``fn(op, average) -> op``: the deprecated ``average=`` mapped to Average or Sum (with
    a DeprecationWarning); both given is a ValueError; neither gives Average."""
    def resolve(op, average):
        return resolve_op(op, average, default=reduce_ops.get("Average"))
    return resolve


def split_list(items, parts: int) -> list:
    """``items`` cut into ``parts`` contiguous pieces of near-equal length (the first pieces
    take the remainder)."""
    base, extra = divmod(len(items), parts)
    bounds = [k * base + min(k, extra) for k in range(parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


def is_iterable(x) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


def num_rank_is_power_2(num_rank: int) -> bool:
    """True for 1, 2, 4, 8, ... (Adasum's requirement on the number of ranks)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def is_version_greater_equal_than(ver: str, target: str) -> bool:
    """``ver >= target`` for dotted versions (only the leading numbers count: 2.1.0rc1 is
    2.1.0)."""
    def numbers(text):
        return tuple(int(re.match(r"\d*", part).group() or 0) for part in text.split("."))
    a, b = numbers(ver), numbers(target)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def extension_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether fuse's ``ext_base_name`` binding (torch, tensorflow, mxnet) can be used here."""
    return importlib.util.find_spec(ext_base_name.split(".")[-1]) is not None


def check_extension(ext_name: str, ext_env_var: str, pkg_path: str, *args) -> None:
    """Raise ImportError naming the framework when fuse's binding for it cannot be used."""
    if not extension_available(ext_name):
        raise ImportError(f"fuse's {ext_name} binding needs {ext_name.split('.')[-1]}, which "
                          f"is not installed ({ext_env_var} has no effect on fuse)")


def gpu_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether the framework sees a GPU (fuse reduces torch CUDA tensors on the device when
    the GPU backend runs, see fuse.job.device_path; other device tensors go through host
    memory)."""
    name = ext_base_name.split(".")[-1]
    if name == "torch" and extension_available(name):
        import torch
        return bool(torch.cuda.is_available())
    if name == "tensorflow" and extension_available(name):
        import tensorflow as tf
        return bool(tf.config.list_physical_devices("GPU"))
    return False


def check_installed_version(name: str, version: str) -> None:
    """Horovod compares a framework's version with the one it was built against; fuse builds
    nothing per framework, so every installed version it supports passes."""


@contextlib.contextmanager
def env(**kwargs: str) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore them."""
    saved = {k: os.environ.get(k) for k in kwargs}
    os.environ.update({k: str(v) for k, v in kwargs.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
