"""The device kinds kernelopt runs on, in one registry that every layer reads.

A kind names its dramatiq queue, the sandbox backend class the child loads for it, the compile
target its runs default to and whether it holds an accelerator (whose jobs count device
seconds and whose timings mean something; the cpu kind runs kernels through the Triton
interpreter and never times). The model's choices, the settings' default offer, the worker's
actors and queues, the job protocol and the backend lookup all come from `KINDS`, so a new
backend is one entry here and one module under `runner/backends/`.

Standard library only: the sandbox child imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.engine.errors import UnknownDevice


@dataclass(frozen=True)
class DeviceKind:
    """One kind of device and everything the layers need to know about it."""

    name: str  # what runs and requests store: 'cuda'
    label: str  # what the upload form shows
    queue: str  # the dramatiq queue its runs go to
    backend: str  # 'module:Class' of the child's backend (runner.backends.Backend)
    default_target: str  # compile target of tiers 2/3 when the deployment names none
    accelerator: bool  # jobs hold a device (device seconds) and can be timed


# In the order of DiagnosisRun.Device's choices (a different order is a migration).
KINDS: dict[str, DeviceKind] = {
    k.name: k
    for k in (
        DeviceKind("cuda", "CUDA GPU", "cuda", "runner.backends.cuda:CudaBackend", "sm_90", accelerator=True),
        DeviceKind(
            "npu", "Ascend NPU", "npu", "runner.backends.npu:NpuBackend", "npu:Ascend910B3", accelerator=True
        ),
        DeviceKind(
            "cpu",
            "CPU (compile-only tiers, interpreter correctness)",
            "cpu",
            "runner.backends.cpu:CpuBackend",
            # tiers 2/3 compile ahead of time for a GPU target on any CPU
            "sm_90",
            accelerator=False,
        ),
    )
}
NAMES: tuple[str, ...] = tuple(KINDS)


def get(name: str) -> DeviceKind:
    """The kind called `name`; UnknownDevice (a ValueError) for any other name."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownDevice(f"unknown device {name!r}; expected one of {', '.join(NAMES)}") from None


def default_offer() -> list[str]:
    """The kinds a deployment offers when it names none: those without an accelerator first,
    because they work on every machine and the first one is the upload form's default."""
    return [k.name for k in sorted(KINDS.values(), key=lambda k: k.accelerator)]


def queues(names: tuple[str, ...] | list[str] = NAMES) -> list[str]:
    """The dramatiq queues of the kinds `names` (default: every kind)."""
    return list(dict.fromkeys(get(n).queue for n in names))


if __name__ == "__main__":  # `python -m diagnosis.engine.devices`: the queues, for the Makefile
    print(" ".join(queues()))
