"""The device-kind registry (diagnosis.engine.devices)."""

from __future__ import annotations

import pytest

from diagnosis.engine import devices
from diagnosis.engine.errors import UnknownDevice


@pytest.mark.parametrize(
    ("name", "queue", "accelerator"),
    [
        pytest.param("cuda", "cuda", True, id="cuda"),
        pytest.param("npu", "npu", True, id="npu"),
        pytest.param("cpu", "cpu", False, id="cpu"),
    ],
)
def test_each_kind_names_its_queue_and_whether_it_holds_an_accelerator(
    name: str, queue: str, accelerator: bool
) -> None:
    kind = devices.get(name)
    assert (kind.name, kind.queue, kind.accelerator) == (name, queue, accelerator)


@pytest.mark.parametrize("name", ["", "rocm", "CUDA"], ids=["empty", "unregistered", "upper-case"])
def test_an_unregistered_kind_is_refused_as_a_value_error(name: str) -> None:
    with pytest.raises(UnknownDevice):
        devices.get(name)
    with pytest.raises(ValueError):
        devices.get(name)


def test_the_default_offer_puts_the_kinds_without_an_accelerator_first() -> None:
    assert devices.default_offer() == ["cpu", "cuda", "npu"]


def test_the_queues_follow_the_registry_order_without_repeats() -> None:
    assert devices.queues() == ["cuda", "npu", "cpu"]
    assert devices.queues(["cpu", "cpu"]) == ["cpu"]
