"""A stand-in `torch` module for the binding's tests on machines without PyTorch or a GPU.

It has what dsa_indexer's tensor paths read (dtypes by torch's names, `Tensor` with shape,
strides, data_ptr, device, views, `empty`, `torch.cuda` streams), nothing that computes: data
pointers come from `allocate(nbytes)`, by default addresses that are never dereferenced (the
tests replace `dsa_indexer._lib`'s raw calls with recorders), or memory of the stand-in CUDA
driver (tests/stub) when a test drives the real library's validation and dispatch with it.

    ft = fake_torch.module()                      # install as sys.modules["torch"] (monkeypatch)
    q = ft.empty((1, 8, 64, 128), dtype=ft.float8_e4m3fn, device="cuda")
"""

from __future__ import annotations

import contextlib
import math
import types


class DType:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return f"torch.{self.name}"

    __str__ = __repr__


DTYPES = {n: DType(n, size) for n, size in (
    ("bfloat16", 2), ("float16", 2), ("float32", 4), ("float64", 8), ("int32", 4), ("int64", 8), ("uint8", 1),
    ("float8_e4m3fn", 1), ("float8_e5m2", 1))}


class Device:
    def __init__(self, spec="cuda"):
        if isinstance(spec, Device):
            spec = str(spec)
        kind, _, index = str(spec).partition(":")
        self.type = kind
        self.index = (int(index) if index else 0) if kind == "cuda" else None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    __repr__ = __str__

    def __eq__(self, other):
        return str(self) == str(Device(other))

    def __hash__(self):
        return hash(str(self))


class _BumpAllocator:
    """256-byte aligned fake addresses, never dereferenced."""

    def __init__(self, base=0x7F00_0000_0000):
        self.next = base

    def __call__(self, nbytes: int) -> int:
        addr = self.next
        self.next += (max(int(nbytes), 1) + 255) // 256 * 256 + 256
        return addr


allocate = _BumpAllocator()  # replace with another callable(nbytes) -> address


def contiguous_strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return tuple(reversed(out))


class Tensor:
    def __init__(self, shape, dtype, device="cuda", strides=None, ptr=None, values=None):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype
        self.device = Device(device)
        self._strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        self._ptr = ptr if ptr is not None else allocate(self.numel() * dtype.itemsize)
        self._values = values  # host values of a CPU tensor made by `tensor`, for tolist()

    # -- what the binding reads --
    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return self.dtype.itemsize

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return all(st == want for n, st, want in zip(self.shape, self._strides, contiguous_strides(self.shape)) if n > 1)

    def contiguous(self):
        return self if self.is_contiguous() else Tensor(self.shape, self.dtype, self.device)

    def to(self, device):
        return self if Device(device) == self.device else Tensor(self.shape, self.dtype, device, values=self._values)

    def cpu(self):
        return self.to("cpu")

    def tolist(self):
        if self._values is None:
            raise RuntimeError("fake_torch: tolist() of a tensor without host values")
        return list(self._values)

    def reshape(self, *shape):
        if shape in ((-1,), ((-1,),)) and self.dim() == 1:
            return self
        raise NotImplementedError("fake_torch: reshape beyond 1-D")

    # -- views --
    def unsqueeze(self, dim):
        dim = dim if dim >= 0 else dim + self.dim() + 1
        inner = self._strides[dim] * self.shape[dim] if dim < self.dim() else 1
        return Tensor(self.shape[:dim] + (1,) + self.shape[dim:], self.dtype, self.device,
                      self._strides[:dim] + (inner,) + self._strides[dim:], self._ptr)

    def __getitem__(self, index):
        if not isinstance(index, int):
            raise NotImplementedError("fake_torch: only integer indexing")
        index = index if index >= 0 else index + self.shape[0]
        return Tensor(self.shape[1:], self.dtype, self.device, self._strides[1:],
                      self._ptr + index * self._strides[0] * self.dtype.itemsize)

    def slice_last(self, n):
        """t[..., :n] (a strided view): for tests of strided operands."""
        return Tensor(self.shape[:-1] + (n,), self.dtype, self.device, self._strides, self._ptr)

    def __repr__(self):
        return f"FakeTensor({list(self.shape)}, {self.dtype}, {self.device}, strides={list(self._strides)})"


def empty(*shape, dtype=None, device="cpu"):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(shape, dtype or DTYPES["float32"], device)


def tensor(values, dtype=None, device="cpu"):
    values = [int(v) for v in values]
    return Tensor((len(values),), dtype or DTYPES["int64"], device, values=values)


class Stream:
    def __init__(self, handle=0, device=None):
        self.cuda_stream = handle


class ExternalStream(Stream):
    pass


def module() -> types.ModuleType:
    """A fresh `torch` stand-in (install it as sys.modules["torch"] for the test's duration)."""
    m = types.ModuleType("torch")
    m.__fake__ = True
    for name, dt in DTYPES.items():
        setattr(m, name, dt)
    m.Tensor, m.empty, m.tensor, m.device = Tensor, empty, tensor, Device
    cuda = types.ModuleType("torch.cuda")
    default = Stream(0)
    cuda.Stream, cuda.ExternalStream = Stream, ExternalStream
    cuda.current_stream = lambda device=None: default
    cuda.stream = lambda s: contextlib.nullcontext(s)
    cuda.is_available = lambda: True
    m.cuda = cuda
    return m
