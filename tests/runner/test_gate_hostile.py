"""Attacks on the verification gate (issue 16): each wrong kernel must come back not verified.

Every module below is uploaded as its own initial version and verified the way the loop does
(`Executor.verify(path)`), through the real sandbox and the Triton interpreter on cpu; the
`gpu` variants run the same table on CUDA. Before the gate moved out of the candidate's
process, every module but `hostile_gate_dtype.py` (and the meta tensor on cpu) was reported
verified: see the report of the gate branch for the before/after table.
"""

from __future__ import annotations

import concurrent.futures
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from diagnosis.engine.executor import VerifyOutcome
from runner.execute import Executor

MODULES = Path(__file__).resolve().parent.parent / "modules"


@dataclass(frozen=True)
class Attack:
    module: str
    kind: str  # the error kind the gate must report (a regex over runner.errors.KINDS)
    case: str = r"case 0"  # the label of the case it must be caught on (a regex)


TABLE = [
    pytest.param(Attack("hostile_gate_patch_verify.py", "incorrect"), id="patches-runner-childlib-verify"),
    pytest.param(Attack("hostile_gate_subclass.py", "type_mismatch"), id="subclass-subtracts-to-zero"),
    pytest.param(Attack("hostile_gate_frames.py", "incorrect"), id="overwrites-the-reference-via-frames"),
    pytest.param(Attack("hostile_gate_forged_fd.py", "bad_output"), id="forged-answer-on-the-response-fd"),
    pytest.param(
        Attack("hostile_gate_decoy.py", "launch_independent", r"verify 0"), id="decoy-launch-torch-computes"
    ),
    pytest.param(
        Attack("hostile_gate_one_shape.py", "incorrect|nan_mismatch", r"derived \d"),
        id="correct-on-one-shape-only",
    ),
    pytest.param(Attack("hostile_gate_fake_tensor.py", "type_mismatch"), id="non-tensor-posing-as-tensor"),
    pytest.param(Attack("hostile_gate_dtype_liar.py", "type_mismatch"), id="subclass-lies-about-its-dtype"),
    pytest.param(Attack("hostile_gate_dtype.py", "dtype_mismatch"), id="plain-wrong-dtype"),
    pytest.param(Attack("hostile_gate_device.py", "device_mismatch"), id="output-on-another-device"),
    pytest.param(Attack("hostile_gate_nan_hiding.py", "nan_mismatch"), id="nan-output-torch-isnan-patched"),
]


def _verify_all(device: str) -> dict[str, VerifyOutcome]:
    executor = Executor(device)
    attacks = [p.values[0] for p in TABLE]

    def one(attack: Attack) -> tuple[str, VerifyOutcome]:
        return attack.module, executor.verify(str(MODULES / attack.module), seeds=(0,), time=False)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, attacks))


@pytest.fixture(scope="module")
def cpu_outcomes() -> dict[str, VerifyOutcome]:
    return _verify_all("cpu")


@pytest.fixture(scope="module")
def cuda_outcomes() -> dict[str, VerifyOutcome]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return _verify_all("cuda")


def _check(attack: Attack, outcome: VerifyOutcome) -> None:
    assert not outcome.passed, f"{attack.module} was verified"
    assert outcome.error is not None
    assert re.fullmatch(attack.kind, outcome.reason), (outcome.reason, outcome.error.message)
    assert re.match(attack.case, outcome.error.message), outcome.error.message


@pytest.mark.parametrize("attack", TABLE)
def test_the_gate_does_not_verify_it(attack: Attack, cpu_outcomes: dict[str, VerifyOutcome]) -> None:
    _check(attack, cpu_outcomes[attack.module])


@pytest.mark.gpu
@pytest.mark.parametrize("attack", TABLE)
def test_the_gate_does_not_verify_it_on_cuda(attack: Attack, cuda_outcomes: dict[str, VerifyOutcome]) -> None:
    _check(attack, cuda_outcomes[attack.module])
