"""Pins the internal Triton APIs behind runner.childlib.launches (triton 3.6.0).

The recorder rebuilds the JIT's specialization from `create_function_from_signature` and
`JITFunction._pack_args`; if a Triton upgrade changes them, these tests say so before the
IR of tiers 2 and 3 silently stops matching what runs. Nothing is executed: launches are
recorded with execute=False on CPU tensors, as the capture job does on a machine without GPU.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from runner.childlib.launches import Launch, parse_target, record_launches


def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(
        out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + tl.load(y_ptr + offs, mask=mask), mask=mask
    )


# Built directly (not with @triton.jit) so that a TRITON_INTERPRET=1 left in the environment
# by another test cannot turn them into interpreted functions.
axpy = JITFunction(_axpy)
tuned_axpy = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((256, 2), (512, 4), (1024, 8))],
    key=["n"],
)(JITFunction(_axpy))


def _record(fn, n: int, grid, **kwargs) -> Launch:
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    with record_launches(execute=False, target=parse_target("sm_90")) as recorder:
        fn[grid](x, y, out, n, 2.0, **kwargs)
    (launch,) = recorder.launches
    return launch


def _args(launch: Launch) -> dict:
    return {a.name: a for a in launch.args}


def test_divisibility_is_recorded_for_2_20_element_float_tensors_and_for_n() -> None:
    launch = _record(axpy, 1 << 20, (1024,), BLOCK=1024)
    args = _args(launch)
    for name in ("x_ptr", "y_ptr", "out_ptr"):
        assert args[name].kind == "tensor" and args[name].type == "*fp32" and args[name].divisible_16
    assert args["n"].divisible_16 and args["n"].type == "i32"
    assert args["alpha"].kind == "float" and not args["alpha"].divisible_16
    # the form ASTSource takes in 3.6: {(arg_index,): [["tt.divisibility", 16]]}
    assert launch.attrs[(3,)] == [["tt.divisibility", 16]]
    assert launch.attrs[(0,)] == [["tt.divisibility", 16]]


def test_no_divisibility_for_n_1001() -> None:
    args = _args(_record(axpy, 1001, (1,), BLOCK=1024))
    assert not args["n"].divisible_16
    assert args["n"].value == 1001
    assert args["x_ptr"].divisible_16  # torch's allocations stay 16-byte aligned


def test_constexpr_values_are_recorded() -> None:
    launch = _record(axpy, 4096, (4,), BLOCK=1024)
    block = _args(launch)["BLOCK"]
    assert block.kind == "constexpr" and block.value == 1024
    assert launch.num_warps == 4 and launch.num_stages == 3
    assert launch.kernel == "_axpy"


def test_a_grid_lambda_is_evaluated_with_the_bound_arguments() -> None:
    launch = _record(axpy, 1 << 20, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), BLOCK=1024)
    assert launch.grid == (1024, 1, 1)
    assert launch.to_json()["programs"] == 1024


def test_an_autotuned_kernel_records_its_number_of_configs() -> None:
    launch = _record(tuned_axpy, 1 << 16, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),))
    assert launch.autotune_configs == 3
    assert _args(launch)["BLOCK"].value == 256  # without a device, the first config
    assert launch.num_warps == 2


def test_an_integer_equal_to_1_is_specialised_into_a_constant() -> None:
    args = _args(_record(axpy, 1, (1,), BLOCK=16))
    assert args["n"].equal_1 and args["n"].type == "constexpr" and args["n"].value == 1


@pytest.mark.parametrize(
    ("text", "backend", "arch"),
    [
        pytest.param("sm_90", "cuda", 90, id="sm_90"),
        pytest.param("sm_90a", "cuda", 90, id="sm_90a"),
        pytest.param("sm_80", "cuda", 80, id="sm_80"),
        pytest.param("gfx942", "hip", "gfx942", id="gfx942"),
        pytest.param("npu:Ascend910B3", "npu", "Ascend910B3", id="npu"),
        pytest.param(None, "cuda", 90, id="default"),
    ],
)
def test_parse_target(text: str | None, backend: str, arch: object) -> None:
    target = parse_target(text)
    assert (target.backend, target.arch) == (backend, arch)


def test_a_target_this_triton_has_no_backend_for_is_described_with_the_default_targets_rules() -> None:
    # a cpu run for an npu target verifies under CUDA triton's interpreter (no npu backend)
    x, y, out = torch.randn(1 << 12), torch.randn(1 << 12), torch.empty(1 << 12)
    with record_launches(execute=False, target=parse_target("npu:Ascend910B3")) as recorder:
        axpy[(4,)](x, y, out, 1 << 12, 2.0, BLOCK=1024)
    (launch,) = recorder.launches
    assert _args(launch)["n"].divisible_16 and launch.attrs[(3,)] == [["tt.divisibility", 16]]


def test_an_autotuned_launch_names_its_config() -> None:
    launch = _record(tuned_axpy, 1 << 12, lambda meta: (triton.cdiv(1 << 12, meta["BLOCK"]),))
    assert launch.autotune_configs == 3
    # without a device the recorder launches the first config
    assert launch.chosen_config() == "_axpy: BLOCK=256, num_warps=2, num_stages=3"
    assert _record(axpy, 1 << 12, (4,), BLOCK=1024).chosen_config() is None


def test_the_recorder_restores_triton_afterwards() -> None:
    run, tuned = JITFunction.run, triton.runtime.autotuner.Autotuner.run
    with record_launches(execute=False):
        assert JITFunction.run is not run
    assert JITFunction.run is run and triton.runtime.autotuner.Autotuner.run is tuned


def test_launches_of_the_autotuners_benchmarking_are_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a device the autotuner times every config with back-to-back launches inside the
    forward; recording those (costly per launch) skewed its choice, and they are not the
    forward's launches. Only the final launch, with the chosen config, is recorded. The device
    is replaced by a launch counter and the benchmark by fixed per-config times."""
    launched: list[int] = []
    def run(self, *a, grid, warmup, **kw):
        if not warmup:  # a warm-up binds and compiles, launches nothing (the configs' precompile)
            launched.append(kw["BLOCK"])

    monkeypatch.setattr(JITFunction, "run", run)
    tuner = triton.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((256, 2), (512, 4), (1024, 8))],
        key=["n"],
    )(JITFunction(_axpy))
    fake_ms = {256: 3.0, 512: 1.0, 1024: 2.0}

    def bench(*args, config, **meta):
        for _ in range(5):  # what do_bench does: many launches of this config
            tuner.fn.run(*args, **meta, **config.all_kwargs())
        ms = fake_ms[config.kwargs["BLOCK"]]
        return [ms, ms, ms]

    tuner._bench = bench
    n = 1 << 12
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    with record_launches(execute=True, target=parse_target("sm_90")) as recorder:
        tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, 2.0)
    assert len(launched) == 3 * 5 + 1  # every benchmark launch ran
    (launch,) = recorder.launches  # but only the forward's own launch was recorded
    assert _args(launch)["BLOCK"].value == 512 and launch.num_warps == 4
    assert launch.grid == (n // 512, 1, 1) and launch.autotune_configs == 3
    assert tuner._bench is bench  # the tuner's own benchmark function is put back
    assert recorder.paused == 0
