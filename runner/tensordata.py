"""Tensors handed between processes as plain data: a JSON header and raw little-endian bytes.

The verification gate moves inputs from the reference job to the candidate job and outputs
from both back to the worker through files in this format, never through pickle: reading one
runs no code, and what it can describe is fixed (tensors of an allowed dtype, numbers, strings,
None, lists, tuples, dicts with string keys, torch dtypes, and `Opaque` markers for what was
refused). Layout of a file:

    MAGIC (6 bytes) | header length (8 bytes, little-endian) | header (UTF-8 JSON) | data

    header = {"byteorder": "little", "value": NODE, "tensors": [TENSOR, ...]}
    TENSOR = {"dtype": "float32", "shape": [2, 3], "stride": [3, 1], "nbytes": 24, "device": "cpu"}
    NODE   = {"tensor": i} | {"list": [NODE...]} | {"tuple": [NODE...]} | {"dict": [[key, NODE]...]}
           | {"int": 1} | {"float": 0.5} | {"bool": true} | {"none": null} | {"str": "s"}
           | {"dtype": "float16"} | {"opaque": "TypeName", "why": "...", "device": "meta"}

A tensor's data is the storage window its strides address (extent = 1 + sum((size - 1) *
stride) elements), so an input's layout (a transposed or expanded view) survives the trip.

`write` runs in the sandbox child. With `strict=True` (the candidate's outputs) only a plain
`torch.Tensor` (`type(x) is torch.Tensor`) on the expected device is written as data; a
subclass, an object posing as a tensor, a tensor on another device, or any other object is
written as an `Opaque` marker, which the trusted side reports. Every torch and builtin function
it uses was looked up when this module was imported, which the child does before it imports
any uploaded file: patching `torch.Tensor.cpu`, `builtins.type` or this module's names later
changes nothing here. (Code in the same process can still write any bytes it likes, through
this module or around it; the point is only that patched code can at most hand back wrong
bytes, which then fail the comparison on the trusted side.)

`read` runs on the trusted side (and in the candidate job for its inputs): every size is checked
against the header and the file, the total against a cap, dtypes against `DTYPES`, the nesting
against `MAX_DEPTH` / `MAX_NODES`; anything else raises `BadTensorData`.

Imports only the standard library at module level; torch when a tensor is written or read.
"""

from __future__ import annotations

import builtins
import errno
import json
import math
import os
import resource
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.errors import BadTensorData

__all__ = ["DTYPES", "MAGIC", "BadTensorData", "Opaque", "capture", "read", "write"]

MAGIC = b"KOTD1\n"
MAX_HEADER_BYTES = 4 << 20
MAX_DEPTH = 32
MAX_NODES = 100_000
DEFAULT_MAX_BYTES = 64 << 30
# a layout-preserving window may be at most this much larger than the tensor; past it the
# tensor is written contiguous (a small view of a huge buffer would drag the buffer along)
MAX_WINDOW_FACTOR = 4

# dtype name -> bytes per element: the only dtypes a file may hold
DTYPES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "complex128": 16,
    "complex64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


@dataclass(frozen=True)
class Opaque:
    """A value the writer refused to hand over as data: what it was and why."""

    type_name: str
    why: str
    device: str = ""


# ---------------------------------------------------------------- writing (the child)

# Looked up at import, before any uploaded module runs (see the module docstring).
_type = builtins.type
_isinstance = builtins.isinstance
_issubclass = builtins.issubclass
_len = builtins.len
_str = builtins.str
_int = builtins.int
_memoryview = builtins.memoryview
_sorted = builtins.sorted
_dumps = json.dumps
_os_open, _os_write, _os_close, _os_replace = os.open, os.write, os.close, os.replace
_tuple_len, _tuple_getitem = tuple.__len__, tuple.__getitem__
_list_len, _list_getitem = list.__len__, list.__getitem__
_dict_keys, _dict_getitem = dict.keys, dict.__getitem__
_SCALARS = {int: "int", float: "float", bool: "bool", str: "str"}
_torch: dict[str, Any] = {}


def capture() -> None:
    """Look up the torch functions the writer uses. The child calls this after importing torch
    and before importing an uploaded module; `write` calls it too, for callers that do not care."""
    if _torch:
        return
    import torch

    base = torch._C.TensorBase  # a C type: its attributes cannot be replaced from Python
    _torch.update(
        Tensor=torch.Tensor,
        dtype_type=torch.dtype,
        uint8=torch.uint8,
        dtype_of=base.dtype.__get__,
        device_of=base.device.__get__,
        shape_of=base.shape.__get__,
        stride=base.stride,
        storage_offset=base.storage_offset,
        numel=base.numel,
        detach=base.detach,
        to=base.to,
        contiguous=base.contiguous,
        as_strided=base.as_strided,
        view=base.view,
        reshape=base.reshape,
        numpy=base.numpy,
        resolve_conj=base.resolve_conj,
        resolve_neg=base.resolve_neg,
        is_contiguous=base.is_contiguous,
    )


def _dtype_name(dtype: Any) -> str:
    return _str(dtype).removeprefix("torch.")


class _Writer:
    def __init__(self, strict: bool, device: str | None, keep_layout: bool) -> None:
        self.strict = strict
        self.device = device
        self.keep_layout = keep_layout
        self.tensors: list[dict[str, Any]] = []
        self.chunks: list[Any] = []
        self.nodes = 0

    def node(self, value: Any, depth: int) -> dict[str, Any]:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            return {"opaque": _type(value).__name__, "why": "nested too deeply or too large"}
        t = _torch
        kind = _type(value)
        if kind is t["Tensor"] or (not self.strict and _isinstance(value, t["Tensor"])):
            return self.tensor(value)
        if _isinstance(value, t["Tensor"]):  # a subclass, or an object whose __class__ says Tensor
            why = (
                "a subclass of torch.Tensor"
                if _issubclass(kind, t["Tensor"])
                else "not a tensor, posing as one"
            )
            return {"opaque": kind.__name__, "why": why}
        if value is None:
            return {"none": None}
        if kind in _SCALARS:
            return {_SCALARS[kind]: value}
        if kind is t["dtype_type"]:
            return {"dtype": _dtype_name(value)}
        # exact containers in strict mode; the reference's torch.return_types (tuple subclasses) too
        if kind is tuple or (not self.strict and _isinstance(value, tuple)):
            items = [_tuple_getitem(value, i) for i in range(_tuple_len(value))]
            return {"tuple": [self.node(v, depth + 1) for v in items]}
        if kind is list or (not self.strict and _isinstance(value, list)):
            items = [_list_getitem(value, i) for i in range(_list_len(value))]
            return {"list": [self.node(v, depth + 1) for v in items]}
        if kind is dict or (not self.strict and _isinstance(value, dict)):
            keys = list(_dict_keys(value))
            if all(_type(k) is str for k in keys):
                return {"dict": [[k, self.node(_dict_getitem(value, k), depth + 1)] for k in keys]}
        return {"opaque": kind.__name__, "why": "not a tensor, number, string, None, list, tuple or dict"}

    def tensor(self, x: Any) -> dict[str, Any]:
        t = _torch
        device = t["device_of"](x)
        if self.device is not None and device.type != self.device:
            return {"opaque": "Tensor", "why": f"a tensor on {device.type}", "device": device.type}
        dtype = _dtype_name(t["dtype_of"](x))
        if dtype not in DTYPES:
            return {"opaque": "Tensor", "why": f"a tensor of dtype {dtype}, which the gate does not carry"}
        x = t["resolve_neg"](t["resolve_conj"](t["detach"](x)))
        shape = [_int(n) for n in t["shape_of"](x)]
        numel = math.prod(shape)
        stride = [_int(s) for s in t["stride"](x)]
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if numel else 0
        if self.keep_layout and numel and extent <= MAX_WINDOW_FACTOR * numel + 1024:
            # the storage window the strides address, copied as it lies
            flat = t["as_strided"](x, (extent,), (1,), t["storage_offset"](x))
        else:
            flat = t["reshape"](t["contiguous"](x), (-1,))
            stride = _contiguous_strides(shape)
            extent = numel
        data = t["numpy"](t["view"](t["contiguous"](t["to"](flat, "cpu")), t["uint8"]))
        self.chunks.append(data)
        nbytes = extent * DTYPES[dtype]
        self.tensors.append(
            {"dtype": dtype, "shape": shape, "stride": stride, "nbytes": nbytes, "device": device.type}
        )
        return {"tensor": _len(self.tensors) - 1}


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def write(
    path: str, value: Any, *, strict: bool = False, device: str | None = None, keep_layout: bool = False
) -> int:
    """Write `value` to `path` (atomically: a temporary name, then a rename); returns the bytes
    written. strict: the candidate's outputs (see the module docstring); device: the device type
    tensors must be on ('cpu', 'cuda', 'npu'), others become Opaque; keep_layout: keep strides
    (inputs), else tensors are written contiguous."""
    capture()
    if sys.byteorder != "little":  # pragma: no cover - every machine we run on is little-endian
        raise BadTensorData("tensor data is written little-endian only")
    writer = _Writer(strict, device, keep_layout)
    root = writer.node(value, 0)
    header = _dumps({"byteorder": "little", "value": root, "tensors": writer.tensors}).encode()
    tmp = path + ".part"
    fd = _os_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    chunks = [_memoryview(c).cast("B") for c in (MAGIC, struct.pack("<Q", _len(header)), header, *writer.chunks)]
    total = 0
    try:
        for view in chunks:
            while view:
                try:
                    n = _os_write(fd, view)
                except OSError as exc:
                    if exc.errno != errno.EFBIG:
                        raise
                    size = sum(v.nbytes for v in chunks)
                    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
                    raise BadTensorData(
                        f"{os.path.basename(path)} needs {size:,} bytes, over this job's file size limit of "
                        f"{limit:,} bytes (RLIMIT_FSIZE): make the case's tensors smaller"
                    ) from exc
                total += n
                view = view[n:]
    finally:
        _os_close(fd)
    _os_replace(tmp, path)
    return total


# ---------------------------------------------------------------- reading (trusted side, and inputs)


def read(path: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The value stored at `path`, tensors as CPU torch tensors; raises BadTensorData."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise BadTensorData(f"cannot read {os.path.basename(path)}: {exc.strerror}") from exc
    if size > max_bytes:
        raise BadTensorData(f"{size} bytes, over the cap of {max_bytes}")
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            raise BadTensorData("not a tensor data file (bad magic)")
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise BadTensorData("truncated header length")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > MAX_HEADER_BYTES:
            raise BadTensorData(f"header of {header_len} bytes, over the cap of {MAX_HEADER_BYTES}")
        try:
            header = json.loads(fh.read(header_len).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadTensorData(f"the header is not JSON: {exc}") from exc
        metas = _tensor_metas(header)
        data_bytes = sum(m[3] for m in metas)
        if len(MAGIC) + 8 + header_len + data_bytes != size:
            raise BadTensorData(
                f"the file holds {size} bytes, the header describes {len(MAGIC) + 8 + header_len + data_bytes}"
            )
        tensors = [_read_tensor(fh, *m) for m in metas]
    counter = [0]
    return _value(header.get("value"), tensors, 0, counter)


def _tensor_metas(header: Any) -> list[tuple[str, list[int], list[int], int, str]]:
    if not isinstance(header, dict) or header.get("byteorder") != "little":
        raise BadTensorData("the header is not a little-endian tensor header")
    raw = header.get("tensors")
    if not isinstance(raw, list) or len(raw) > MAX_NODES:
        raise BadTensorData("the header's tensor list is missing or too long")
    metas = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise BadTensorData(f"tensor {i}: not an object")
        dtype, shape, stride, nbytes, device = (
            t.get(k) for k in ("dtype", "shape", "stride", "nbytes", "device")
        )
        if dtype not in DTYPES:
            raise BadTensorData(f"tensor {i}: dtype {dtype!r} is not one the gate carries")
        if not _ints(shape) or not _ints(stride) or len(shape) != len(stride) or len(shape) > MAX_DEPTH:
            raise BadTensorData(f"tensor {i}: shape {shape!r} / stride {stride!r} are not lists of sizes")
        if any(n < 0 for n in shape) or any(s < 0 for s in stride):
            raise BadTensorData(f"tensor {i}: a negative size or stride")
        numel = math.prod(shape)
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if numel else 0
        if type(nbytes) is not int or nbytes != extent * DTYPES[dtype]:
            raise BadTensorData(
                f"tensor {i}: {nbytes!r} bytes where shape and stride need {extent * DTYPES[dtype]}"
            )
        if not isinstance(device, str) or len(device) > 32:
            raise BadTensorData(f"tensor {i}: device {device!r} is not a device name")
        metas.append((dtype, shape, stride, nbytes, device))
    return metas


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _read_tensor(fh: Any, dtype: str, shape: list[int], stride: list[int], nbytes: int, device: str) -> Any:
    import torch

    flat = torch.empty(nbytes // DTYPES[dtype], dtype=getattr(torch, dtype))
    if nbytes:
        view = memoryview(flat.view(torch.uint8).numpy()).cast("B")
        got = 0
        while got < nbytes:
            n = fh.readinto(view[got:])
            if not n:
                raise BadTensorData("the data ends early")
            got += n
    return flat.as_strided(shape, stride)


def _value(node: Any, tensors: list[Any], depth: int, counter: list[int]) -> Any:
    counter[0] += 1
    if depth > MAX_DEPTH or counter[0] > MAX_NODES:
        raise BadTensorData("the value is nested too deeply or has too many parts")
    if not isinstance(node, dict) or len(node) == 0:
        raise BadTensorData(f"not a value node: {str(node)[:80]}")
    if "opaque" in node:
        return Opaque(
            str(node.get("opaque"))[:200], str(node.get("why", ""))[:500], str(node.get("device", ""))[:32]
        )
    if len(node) != 1:
        raise BadTensorData(f"a value node with several kinds: {sorted(node)[:5]}")
    ((kind, payload),) = node.items()
    if kind == "tensor":
        if type(payload) is not int or not 0 <= payload < len(tensors):
            raise BadTensorData(f"tensor index {payload!r} out of range")
        return tensors[payload]
    if kind in ("list", "tuple"):
        if not isinstance(payload, list):
            raise BadTensorData(f"a {kind} node without items")
        items = [_value(v, tensors, depth + 1, counter) for v in payload]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        if not isinstance(payload, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in payload
        ):
            raise BadTensorData("a dict node whose items are not [key, value] pairs")
        return {k: _value(v, tensors, depth + 1, counter) for k, v in payload}
    scalar_types = {"int": int, "float": float, "bool": bool, "str": str}
    if kind in scalar_types:
        value = payload
        if kind == "float" and type(value) is int:
            value = float(value)
        if type(value) is not scalar_types[kind]:
            raise BadTensorData(f"a {kind} node holding {type(payload).__name__}")
        return value
    if kind == "none":
        return None
    if kind == "dtype":
        import torch

        if payload not in DTYPES and payload not in ("uint16", "uint32", "uint64", "complex32"):
            raise BadTensorData(f"unknown dtype {payload!r}")
        return getattr(torch, payload)
    raise BadTensorData(f"unknown value kind {kind!r}")
