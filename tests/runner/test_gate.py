"""The gate outside the candidate's process: the plain tensor format, derived cases, the
launch-dependence probe, the trusted comparison's refusals, and the executor's wiring (one
reference job per run, the decision before timing, nothing of the reference in a job's
directory). The attacks themselves are in test_gate_hostile.py."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from runner import gate, tensordata
from runner.childlib import derive
from runner.childlib.launches import Perturber, filled_allocations
from runner.compare import changed_elements, compare_outputs
from runner.execute import Executor
from runner.tensordata import BadTensorData, Opaque

MODULES = Path(__file__).resolve().parent.parent / "modules"


# ---------------------------------------------------------------- the plain tensor format


def _round_trip(tmp_path: Path, value, **kw):
    path = str(tmp_path / "v.kot")
    tensordata.write(path, value, **kw)
    return tensordata.read(path)


def _same(a, b) -> bool:
    """Equal values, tensors bit for bit (NaN included) and of exactly type torch.Tensor."""
    if isinstance(a, torch.Tensor):
        return (
            type(b) is torch.Tensor
            and (a.dtype, a.shape) == (b.dtype, b.shape)
            and torch.equal(
                a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8)
            )
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(torch.randn(3, 5), id="fp32"),
        pytest.param(torch.randn(4, 4).to(torch.bfloat16), id="bf16"),
        pytest.param(torch.randn(7).to(torch.float8_e4m3fn), id="fp8"),
        pytest.param(torch.tensor([True, False, True]), id="bool"),
        pytest.param(torch.arange(6, dtype=torch.int64).reshape(2, 3), id="int64"),
        pytest.param(torch.randn(3, dtype=torch.complex64), id="complex"),
        pytest.param(torch.tensor(2.5), id="0-d"),
        pytest.param(torch.empty(0, 4), id="empty"),
        pytest.param(
            [torch.randn(2), 3, 0.5, float("nan"), True, None, "s", torch.float16], id="inputs-list"
        ),
        pytest.param((torch.randn(2), {"a": torch.ones(1), "b": [1, (2, 3)]}), id="nested"),
    ],
)
def test_values_round_trip(tmp_path: Path, value) -> None:
    assert _same(value, _round_trip(tmp_path, value))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.randn(4, 6).t(), id="transposed"),
        pytest.param(lambda: torch.randn(1, 5).expand(3, 5), id="expanded"),
        pytest.param(lambda: torch.randn(8, 8)[::2, 1:], id="strided-slice"),
    ],
)
def test_inputs_keep_their_layout(tmp_path: Path, make) -> None:
    x = make()
    back = _round_trip(tmp_path, [x], keep_layout=True)[0]
    assert torch.equal(back, x) and back.stride() == x.stride()
    plain = _round_trip(tmp_path, [x])[0]  # outputs: contiguous
    assert torch.equal(plain, x) and plain.is_contiguous()


class _Sub(torch.Tensor):
    pass


class _Poser:
    __class__ = property(lambda self: torch.Tensor)  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("value", "why", "device"),
    [
        pytest.param(torch.ones(2).as_subclass(_Sub), "a subclass of torch.Tensor", "", id="subclass"),
        pytest.param(torch.nn.Parameter(torch.ones(2)), "a subclass of torch.Tensor", "", id="parameter"),
        pytest.param(_Poser(), "not a tensor, posing as one", "", id="poser"),
        pytest.param(torch.ones(2).numpy(), "not a tensor, number", "", id="numpy-array"),
        pytest.param(torch.ones(2, device="meta"), "a tensor on meta", "meta", id="meta-device"),
    ],
)
def test_the_strict_writer_hands_over_only_plain_tensors_on_the_device(
    tmp_path: Path, value, why, device
) -> None:
    back = _round_trip(tmp_path, (torch.ones(1), value), strict=True, device="cpu")
    assert type(back[0]) is torch.Tensor
    assert isinstance(back[1], Opaque) and back[1].why.startswith(why) and back[1].device == device


def test_the_writer_ignores_patched_torch_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensordata.capture()  # as the child does before importing an upload
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: torch.zeros_like(self))
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda self, *a, **k: torch.zeros_like(self))
    x = torch.randn(5)
    assert torch.equal(_round_trip(tmp_path, x, strict=True, device="cpu"), x)


def _file(
    header: dict, data: bytes = b"", *, magic: bytes = tensordata.MAGIC, length: int | None = None
) -> bytes:
    import json

    raw = json.dumps(header).encode()
    return magic + struct.pack("<Q", len(raw) if length is None else length) + raw + data


GOOD = {"byteorder": "little", "value": {"tensor": 0},
        "tensors": [{"dtype": "float32", "shape": [2], "stride": [1], "nbytes": 8, "device": "cpu"}]}  # fmt: skip


def _with(**tensor) -> dict:
    return {**GOOD, "tensors": [{**GOOD["tensors"][0], **tensor}]}


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_file(GOOD, b"\0" * 8, magic=b"PICKLE"), id="bad-magic"),
        pytest.param(_file(GOOD, b"\0" * 4), id="truncated-data"),
        pytest.param(_file(GOOD, b"\0" * 12), id="trailing-bytes"),
        pytest.param(_file(GOOD, b"\0" * 8, length=1 << 40), id="huge-header-length"),
        pytest.param(_file(_with(dtype="object"), b"\0" * 8), id="dtype-not-allowed"),
        pytest.param(_file(_with(nbytes=4), b"\0" * 4), id="nbytes-lies"),
        pytest.param(_file(_with(stride=[-1]), b"\0" * 8), id="negative-stride"),
        pytest.param(_file(_with(shape=["2"]), b"\0" * 8), id="shape-not-ints"),
        pytest.param(_file({**GOOD, "value": {"tensor": 3}}, b"\0" * 8), id="tensor-index-out-of-range"),
        pytest.param(_file({**GOOD, "value": {"pickle": "cos\nsystem"}}, b"\0" * 8), id="unknown-node"),
        pytest.param(_file({**GOOD, "byteorder": "big"}, b"\0" * 8), id="big-endian"),
        pytest.param(tensordata.MAGIC + b"\x05\0\0\0\0\0\0\0{nope", id="header-not-json"),
    ],
)
def test_the_reader_refuses_what_the_format_does_not_describe(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.kot"
    path.write_bytes(content)
    with pytest.raises(BadTensorData):
        tensordata.read(str(path))


def test_the_reader_refuses_a_file_over_its_cap(tmp_path: Path) -> None:
    path = str(tmp_path / "big.kot")
    tensordata.write(path, torch.zeros(1000))
    assert tensordata.read(path, max_bytes=5000).shape == (1000,)
    with pytest.raises(BadTensorData):
        tensordata.read(path, max_bytes=3000)


def test_the_writer_names_the_file_size_limit_it_ran_into(tmp_path: Path) -> None:
    """Past RLIMIT_FSIZE the kernel refuses the write (EFBIG, Python ignores SIGXFSZ): the
    error says how big the file had to be and what the limit is, not just "File too large"."""
    script = (
        "import resource, sys, torch\n"
        "from runner import tensordata\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
        "try:\n"
        "    tensordata.write(sys.argv[1], torch.zeros(1 << 19))\n"
        "except tensordata.BadTensorData as exc:\n"
        "    print(exc)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "in.kot")],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "in.kot needs 2,097," in out
    assert "over this job's file size limit of 1,048,576 bytes (RLIMIT_FSIZE)" in out


# ---------------------------------------------------------------- derived odd-shaped cases


@pytest.mark.parametrize(
    ("inputs", "fixed", "shapes"),
    [
        pytest.param([torch.randn(4096), torch.randn(4096), 0.5], set(), [(97,), (97,), ()], id="vector"),
        pytest.param(
            [torch.randn(128, 64), torch.randn(64, 256)], set(), [(61, 37), (37, 97)], id="gemm-K-agrees"
        ),
        pytest.param([torch.randn(48, 64)], {64}, [(37, 64)], id="size-fixed-by-weights"),
        pytest.param([torch.randn(1000), 1000], set(), [(97,), ()], id="integer-size-argument"),
    ],
)
def test_derivations_shrink_sizes_by_value(inputs, fixed, shapes) -> None:
    (first, *_), why = derive.derivations(inputs, fixed)
    assert why == ""
    derived = first.apply(inputs)
    assert [tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in derived] == shapes
    if isinstance(inputs[-1], int) and not isinstance(inputs[-1], bool):
        assert derived[-1] == 97
    for x, d in zip(inputs, derived, strict=True):  # values are a slice of the original's
        if isinstance(x, torch.Tensor):
            assert torch.equal(d, x[tuple(slice(0, n) for n in d.shape)])


@pytest.mark.parametrize(
    ("inputs", "fixed", "why"),
    [
        pytest.param([torch.randn(8, 8)], set(), "no input dimension", id="small-dims"),
        pytest.param([torch.randn(64, 64)], {64}, "every size", id="all-fixed"),
        pytest.param([3, 4.0], set(), "no tensor input", id="no-tensors"),
    ],
)
def test_it_says_why_no_case_can_be_derived(inputs, fixed, why) -> None:
    options, reason = derive.derivations(inputs, fixed)
    assert options == [] and reason.startswith(why)


def test_a_derivation_the_reference_cannot_run_is_dropped_with_its_reason() -> None:
    weight = torch.randn(64, 64)

    def reference(inputs):
        return inputs[0] @ weight  # fixes the last dimension of x to 64, which is not a parameter here

    kept, why = derive.choose([torch.randn(64, 64)], set(), reference([torch.randn(64, 64)]), reference, None)
    assert kept == [] and "shrinking every size" in why
    kept, why = derive.choose([torch.randn(96, 64)], set(), reference([torch.randn(96, 64)]), reference, None)
    assert [d.sizes for d in kept] == [((96, 61),)] and why == ""  # all but the last dimension's size


# ---------------------------------------------------------------- the launch-dependence probe


def test_the_perturber_moves_only_what_a_launch_wrote() -> None:
    x, out, flags = torch.randn(64), torch.full((64,), float("nan")), torch.zeros(64, dtype=torch.int32)
    before_x = x.clone()

    def launch():
        out[:40] = x[:40] * 2
        flags[:10] = 1

    p = Perturber(lambda: None)
    p.around(launch, (x, out, flags), {})
    assert torch.equal(x, before_x)  # read, not written: untouched
    assert not torch.equal(out[:40], before_x[:40] * 2) and torch.isnan(out[40:]).all()
    assert torch.equal(flags[:10], torch.zeros(10, dtype=torch.int32)) and flags[10:].eq(0).all()
    assert (p.buffers, p.elements) == (2, 50)


def test_a_launch_that_writes_what_recycled_memory_held_still_counts_as_written() -> None:
    """Softmax over one column writes all ones; an output buffer recycled from the forward's
    earlier run can hold exactly that. Inside filled_allocations, fresh buffers never do."""
    x = torch.randn(50, 1)

    def forward() -> tuple[Perturber, torch.Tensor]:
        out = torch.empty_like(x)
        p = Perturber(lambda: None)

        def launch() -> None:
            out.copy_(torch.softmax(x, dim=1))

        p.around(launch, (x, out), {})
        return p, out

    with filled_allocations():
        seen = {
            "float": torch.empty(3),
            "int": torch.empty(3, dtype=torch.int64),
            "bool": torch.empty(3, dtype=torch.bool),
            "like": torch.empty_like(x),
        }
        p, out = forward()
    assert torch.isnan(seen["float"]).all() and torch.isnan(seen["like"]).all()
    assert seen["int"].eq(-1).all() and seen["bool"].all()
    assert (p.buffers, p.elements) == (1, 50) and not torch.equal(out, torch.ones(50, 1))
    stale = torch.ones(50, 1)  # what an unfilled buffer may hold: the very result
    p = Perturber(lambda: None)
    p.around(lambda: stale.copy_(torch.softmax(x, dim=1)), (x, stale), {})
    assert p.buffers == 0  # why the fill is needed: identical bits read as nothing written


def test_changed_elements_counts_bits() -> None:
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert changed_elements(a, a.clone()) == (0, 3)
    assert changed_elements((a, torch.ones(2)), (torch.tensor([1.0, float("nan"), 4.0]), torch.ones(2))) == (
        1,
        5,
    )


# ---------------------------------------------------------------- the trusted comparison


@pytest.mark.parametrize(
    ("out", "ref", "kind"),
    [
        pytest.param(
            Opaque("Agreeable", "a subclass of torch.Tensor"), torch.ones(2), "type_mismatch", id="subclass"
        ),
        pytest.param(
            (torch.ones(2), Opaque("Tensor", "a tensor on meta", "meta")),
            (torch.ones(2), torch.ones(2)),
            "device_mismatch",
            id="meta-in-a-tuple",
        ),  # fmt: skip
        pytest.param(
            (torch.ones(2), 0.75), (torch.ones(2), 0.5), "incorrect", id="wrong-float-beside-a-tensor"
        ),
        pytest.param((torch.ones(2), 3), (torch.ones(2), 2), "incorrect", id="wrong-int-beside-a-tensor"),
    ],
)
def test_the_comparison_names_what_the_writer_refused(out, ref, kind) -> None:
    result = compare_outputs(out, ref, has_dot=False)
    assert not result.ok and result.kind == kind


# ---------------------------------------------------------------- judged against Model's float64 run


def _exact_case(ref_error: float, out_error: float, n: int = 1000):
    """(out, ref, exact): float32 outputs `ref_error` and `out_error` (relative, in opposite
    directions) from a float64 `exact`."""
    exact = torch.linspace(1.0, 2.0, n, dtype=torch.float64)
    ref = (exact * (1 + ref_error)).float()
    out = (exact * (1 - out_error)).float()
    return out, ref, exact


def test_an_output_as_near_the_exact_answer_as_the_reference_passes() -> None:
    out, ref, exact = _exact_case(3e-5, 2e-5)  # 5e-5 apart: over the float32 l2 bound of 1e-5
    assert not compare_outputs(out, ref, has_dot=False).ok
    result = compare_outputs(out, ref, has_dot=False, exact=lambda: exact)
    assert result.ok, result.message
    judged = result.tolerance["float64"]
    assert judged["ref_rel_l2"] == pytest.approx(3e-5, rel=0.05) and judged["rel_l2"] == pytest.approx(
        2e-5, rel=0.05
    )
    assert result.rel_l2_err == pytest.approx(5e-5, rel=0.05)  # still the distance to the reference


@pytest.mark.parametrize(
    "ref_error, out_error, says",
    [
        pytest.param(3e-5, 3e-4, "against the float64 run too", id="further-off-than-4x-the-reference"),
        pytest.param(2e-3, 0.0, "more than rounding", id="reference-off-by-more-than-rounding"),
    ],
)
def test_the_float64_run_allows_only_the_references_rounding(ref_error, out_error, says) -> None:
    out, ref, exact = _exact_case(ref_error, out_error)
    result = compare_outputs(out, ref, has_dot=False, exact=lambda: exact)
    assert not result.ok and result.kind == "incorrect" and says in result.message


def test_one_wrong_element_fails_beside_the_references_rounding() -> None:
    out, ref, exact = _exact_case(3e-5, 0.0, n=100_000)
    out[123] += 0.01  # 2000x the reference's worst element
    result = compare_outputs(out, ref, has_dot=False, exact=lambda: exact)
    assert not result.ok and "1 of 100000 elements" in result.message


def test_the_float64_run_is_read_only_for_a_failing_float32_output() -> None:
    def unread():
        raise AssertionError("read")

    out, ref, _ = _exact_case(0.0, 0.0)
    assert compare_outputs(out, ref, has_dot=False, exact=unread).ok
    half = torch.ones(8, dtype=torch.float16)
    assert not compare_outputs(half * 1.5, half, has_dot=False, exact=unread).ok
    assert (
        compare_outputs(torch.ones(3), torch.zeros(3), has_dot=False, exact=lambda: None).kind == "incorrect"
    )
    wrong_shape = compare_outputs(torch.ones(3), torch.zeros(3), has_dot=False, exact=lambda: torch.zeros(4))
    assert wrong_shape.kind == "incorrect" and "float64" not in wrong_shape.message


# ---------------------------------------------------------------- the executor's wiring


@pytest.fixture(scope="module")
def executor() -> Executor:
    return Executor("cpu")


def test_one_reference_job_serves_every_candidate(executor: Executor) -> None:
    parent = str(MODULES / "correct_add.py")
    before = len(executor.costs)
    first = executor.verify(parent, seeds=(0,), time=False)
    second = executor.verify(
        parent, str(MODULES / "broken_wrong.py"), seeds=(0,), time=False, reference=parent
    )
    assert first.passed and second.reason == "incorrect"
    assert [c.job for c in executor.costs[before:]] == ["reference", "verify", "verify"]
    store = executor.gate.dir
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert not any(p.name.endswith(".out.kot") for p in store.rglob("*"))  # outputs stay in memory


def _reference_set(executor: Executor, parent: str, opts: dict) -> gate.ReferenceSet:
    """The gate's reference set of `parent` for seed 0, as Executor.verify gets it."""
    key = gate.GateStore.key(parent, "cpu", None, opts)
    ref, _ = executor.gate.reference(
        lambda r, w: executor.run(r, workdir=w),
        lambda need: executor._request("reference", parent, seeds=need.seeds,
                                       options={**opts, "timed_seeds": need.timed_seeds, "alt_seeds": need.alt_seeds}),
        key, [0], opts,
    )  # fmt: skip
    assert ref is not None
    return ref


def test_a_jobs_directory_holds_the_inputs_and_never_the_reference_outputs(
    executor: Executor, tmp_path: Path
) -> None:
    opts = {"time": False}
    ref = _reference_set(executor, str(MODULES / "correct_add.py"), opts)
    plan = gate.plan(ref, [0], opts, decision=False)
    gate.stage_inputs(plan, tmp_path)
    names = sorted(p.name for p in (tmp_path / "gate-in").iterdir())
    assert names and all(n.endswith(".in.kot") for n in names)
    assert "verify0-s0-alt.in.kot" in names  # the sensitivity check's other inputs
    assert [r.key for r in plan.perturb] == ["verify0-s0-main"]


def test_a_module_without_verify_inputs_gets_derived_cases(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "correct_scale_rows.py"), seeds=(0, 1), time=False)
    assert outcome.passed, outcome.error
    assert outcome.checked == ["case 0", "derived 0"]
    derived = outcome.cases[1]
    assert (derived.kind, derived.numel, derived.seeds) == ("derived", 37 * 64, (0, 1))
    assert derived.launch_dependence.startswith("changes when")  # the smallest case is probed
    assert any("derived 0: 48->37" in n for n in outcome.notes)


def test_a_module_whose_sizes_cannot_shrink_says_so(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "correct_small_double.py"), seeds=(0,), time=False)
    assert outcome.passed, outcome.error
    assert outcome.checked == ["case 0"]
    assert outcome.notes == (
        "no odd-shaped case could be derived from case 0: no input dimension is 16 or larger",
    )


def test_a_timed_job_waits_for_the_verdict_and_is_not_timed_when_wrong() -> None:
    executor = Executor("cpu")
    executor.decide_before_timing = True  # what a device does; cpu jobs do not time
    good = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,))
    assert good.passed and "decision" in executor.costs[-1].phases and "timing" in executor.costs[-1].phases
    bad = executor.verify(str(MODULES / "broken_wrong.py"), seeds=(0,))
    phases = executor.costs[-1].phases
    assert bad.reason == "incorrect" and "decision" in phases
    assert "timing" not in phases and "perturbation" not in phases
    assert phases["decision"] < 30


def _await(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_float64_run_is_kept_only_where_the_float32_reference_is_off_it(executor: Executor) -> None:
    opts = {"time": False}
    rounded = _reference_set(executor, str(MODULES / "correct_add.py"), opts)  # x * a + y: one rounding
    assert rounded.runs and all(r.exact_path is None for r in rounded.runs.values())
    off = _reference_set(executor, str(MODULES / "correct_cancelling_dot.py"), opts)
    assert off.runs and all(r.exact_path is not None and r.exact_path.exists() for r in off.runs.values())


def test_the_decider_compares_each_output_as_it_is_written(executor: Executor, tmp_path: Path) -> None:
    opts = {"time": True}
    ref = _reference_set(executor, str(MODULES / "correct_add.py"), opts)
    plan = gate.plan(ref, [0], opts, decision=True)
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate-in").mkdir()
    decider = gate.Decider(ref, plan, tmp_path, override=None)
    decider.start()
    try:
        keys = [pr.key for pr in plan.runs]
        for k in keys:  # the job writes its runs' outputs one by one: each is judged before ready
            tensordata.write(str(tmp_path / "gate" / f"{k}.out.kot"), ref.runs[_run_of(k, plan)].output)
            assert _await(lambda k=k: k in decider.memo), k
        judged = {k: decider.memo[k][1] for k in keys}
        assert all((c[1] if isinstance(c, tuple) else c).ok for c in judged.values())
        assert not (tmp_path / "gate-in" / "decision.json").exists()  # no decision before ready
        # an output rewritten after it was judged ahead is judged again at ready
        main = next(pr for pr in plan.runs if pr.ref.variant == "main")
        tensordata.write(str(tmp_path / "gate" / f"{main.key}.out.kot"), main.ref.output * 2 + 1)
        (tmp_path / "gate" / "ready").write_text("")
        assert _await(lambda: decider.decided is not None)
    finally:
        decider.stop()
    assert decider.decided is False
    assert json.loads((tmp_path / "gate-in" / "decision.json").read_text()) == {"time": False}


def _run_of(key: str, plan: gate.Plan) -> tuple[str, int, str]:
    r = next(pr.ref for pr in plan.runs if pr.key == key)
    return (r.spec.label, r.seed, r.variant)


def test_a_kernel_nearer_the_exact_dot_than_torch_passes_through_the_float64_run(executor: Executor) -> None:
    path = MODULES / "correct_cancelling_dot.py"
    spec = importlib.util.spec_from_file_location("cancelling_dot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = module.cancelling(1000)
    float32, exact = float(torch.dot(x, y)), float(torch.dot(x.double(), y.double()))
    assert (
        abs(float32 - exact) / abs(exact) > 1e-5
    )  # the fixture's premise: torch's own rounding fails the table
    outcome = executor.verify(str(path), seeds=(0,), time=False)
    assert outcome.passed, outcome.error
    assert all(c.tolerance["float64"]["rel_l2"] < 1e-6 for c in outcome.cases)
    judged = [n for n in outcome.notes if "judged against Model's float64 run" in n]
    assert [n.split(":")[0] for n in judged] == [
        f"{case}, seed 0{other}" for case in ("case 0", "verify 0") for other in ("", " (other inputs)")
    ]
    without = executor.verify(str(path), seeds=(0,), time=False, options={"exact": False})
    assert without.reason == "incorrect" and "(l2 bound 1e-05)" in without.error.message


def test_the_reference_job_failing_is_the_outcome(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,), options={"cpu_max_elements": 10})
    assert outcome.reason == "no_checkable_case" and not outcome.ok
    assert [c.job for c in executor.costs[-1:]] == ["reference"]


def test_the_store_is_removed_on_close() -> None:
    executor = Executor("cpu")
    store = executor.gate.dir
    assert store.exists()
    executor.close()
    assert not os.path.exists(store)
