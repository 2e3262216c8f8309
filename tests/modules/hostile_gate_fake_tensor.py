"""Hostile (gate): returns an object that is not a tensor but says it is one.

Its `__class__` answers `torch.Tensor`, so `isinstance(out, torch.Tensor)` holds; every torch
function on it runs on the wrong values it wraps (`__torch_function__`), except subtraction,
which answers zeros: a comparison in the candidate's process measures no error.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Impostor:
    def __init__(self, data):
        self._data = data

    __class__ = property(lambda self: torch.Tensor)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs or {})))

    def __getattr__(self, name):
        attr = getattr(self._data, name)
        if callable(attr):
            return lambda *a, **k: _wrap(attr(*_unwrap(a), **_unwrap(k)))
        return attr

    def __sub__(self, other):
        return Impostor(torch.zeros_like(self._data))

    __rsub__ = __sub__

    def __getitem__(self, key):
        return Impostor(self._data[_unwrap(key)])

    def __eq__(self, other):
        return Impostor(self._data == _unwrap(other))

    def __ne__(self, other):
        return Impostor(self._data != _unwrap(other))

    def __gt__(self, other):
        return Impostor(self._data > _unwrap(other))

    def __or__(self, other):
        return Impostor(self._data | _unwrap(other))

    def __and__(self, other):
        return Impostor(self._data & _unwrap(other))

    def __truediv__(self, other):
        return Impostor(self._data / _unwrap(other))

    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __bool__(self):
        return bool(self._data)

    def __len__(self):
        return len(self._data)


def _unwrap(value):
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value._data if type(value) is Impostor else value


def _wrap(value):
    return Impostor(value) if type(value) is torch.Tensor else value


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)  # wrong: no alpha


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return x * self.alpha + y


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.alpha, BLOCK=1024)
        return Impostor(out)


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_verify_inputs():
    return [[torch.randn(17), torch.randn(17)]]


def get_init_inputs():
    return [0.5]
