"""Device backends (runner.backends) against the registry that names them."""

from __future__ import annotations

import importlib

import pytest

from diagnosis.engine import devices
from runner.backends import get_backend


@pytest.mark.parametrize("kind", list(devices.KINDS.values()), ids=list(devices.NAMES))
def test_each_registered_kind_names_a_backend_class_of_that_kind(kind: devices.DeviceKind) -> None:
    module, _, name = kind.backend.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert cls.kind == kind.name
    assert cls.can_time is kind.accelerator


def test_the_cpu_backend_comes_from_the_registry() -> None:
    assert get_backend("cpu").kind == "cpu"


def test_an_unregistered_kind_has_no_backend() -> None:
    with pytest.raises(ValueError):
        get_backend("rocm")
