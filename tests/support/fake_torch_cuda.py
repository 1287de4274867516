"""A stand-in for the torch.cuda surface fuse's device path uses: NOT a GPU.

``install()`` makes :mod:`fuse.frameworks.torch.device` treat CPU tensors as the device's
tensors (so they take the device path, on the stand-in CuPy of ``fake_cupy``), gives a fixed
"current stream" pointer, and traps host copies: ``Tensor.cpu()``, ``Tensor.numpy()``,
``Tensor.to("cpu")``, ``Tensor.tolist()`` and NumPy reading a tensor (``np.asarray``, any NumPy
function: ``Tensor.__array__``) made by fuse are recorded in ``fake_cupy.HOST_COPIES`` while
installed (the tests' own reads of the results are not).
"""

from __future__ import annotations

import torch

import fake_cupy

CURRENT_STREAM = 0x7777      # the "framework's current stream" of every tensor here


class FakeTorchCuda:
    device_type = "cpu"

    def current_stream_ptr(self, device: int) -> int:
        return CURRENT_STREAM

    def record(self, tensor) -> None:
        """(CPU memory has no streams to record.)"""

    def device_index(self, tensor) -> int:
        return 0


def _trap(name, original, when=lambda *a, **k: True):
    def wrapper(self, *args, **kwargs):
        if when(*args, **kwargs):
            fake_cupy.record_host_copy(f"Tensor.{name}")
        return original(self, *args, **kwargs)
    return wrapper


def _to_cpu(*args, **kwargs):
    target = args[0] if args else kwargs.get("device")
    return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"


def install() -> None:
    fake_cupy.install()
    from fuse.frameworks.torch import device
    device.cuda = FakeTorchCuda()
    torch.Tensor.cpu = _trap("cpu", torch.Tensor.cpu)
    torch.Tensor.numpy = _trap("numpy", torch.Tensor.numpy)
    torch.Tensor.to = _trap("to", torch.Tensor.to, _to_cpu)
    torch.Tensor.tolist = _trap("tolist", torch.Tensor.tolist)
    torch.Tensor.__array__ = _trap("__array__", torch.Tensor.__array__)
