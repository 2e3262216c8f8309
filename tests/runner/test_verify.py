"""The verification gate: the tolerance table (runner.compare), and correct modules end to end.

Correct modules run through the real sandbox and the Triton interpreter (device=cpu): the
reference job, the verify job and the comparison in this process (runner.gate).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from diagnosis.engine.verdict import TimingVerdict, median
from runner.compare import TOLERANCES, compare_outputs, tolerance_for, unchanged_fraction
from runner.execute import Executor

MODULES = Path(__file__).resolve().parent.parent / "modules"


def _ref(dtype: torch.dtype = torch.float32, n: int = 4096, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)


def _perturb(ref: torch.Tensor, rel: float) -> torch.Tensor:
    """ref with a relative error of about `rel` everywhere (in float64, then back to its dtype)."""
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    return (ref.double() * (1 + rel * noise)).to(ref.dtype)


@pytest.mark.parametrize(
    ("dtype", "has_dot", "rel_error", "ok"),
    [
        pytest.param(torch.float32, False, 1e-7, True, id="fp32-ulps"),
        pytest.param(torch.float32, False, 1e-3, False, id="fp32-elementwise-1e-3-fails"),
        pytest.param(torch.float32, True, 1e-3, True, id="fp32-tf32-dot-1e-3-passes"),
        pytest.param(torch.float32, True, 3e-2, False, id="fp32-dot-3e-2-fails"),
        pytest.param(torch.float16, False, 5e-4, True, id="fp16-half-ulp"),
        pytest.param(torch.float16, False, 2e-2, False, id="fp16-2e-2-fails"),
        pytest.param(torch.bfloat16, False, 4e-3, True, id="bf16-half-ulp"),
        pytest.param(torch.bfloat16, False, 1e-1, False, id="bf16-1e-1-fails"),
        pytest.param(torch.float64, False, 1e-12, True, id="fp64"),
        pytest.param(torch.float64, False, 1e-6, False, id="fp64-1e-6-fails"),
    ],
)
def test_tolerance_table(dtype: torch.dtype, has_dot: bool, rel_error: float, ok: bool) -> None:
    ref = _ref(dtype)
    result = compare_outputs(_perturb(ref, rel_error), ref, has_dot=has_dot)
    assert result.ok is ok, result.message
    if not ok:
        assert result.kind == "incorrect"


def test_every_float_dtype_has_both_rows() -> None:
    for name in ("float64", "float32", "float16", "bfloat16", "float8"):
        assert (name, False) in TOLERANCES and (name, True) in TOLERANCES
    assert tolerance_for(torch.int32, False).exact
    assert tolerance_for("torch.float8_e4m3fn", True).atol == TOLERANCES[("float8", True)].atol


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        pytest.param(lambda o: o.reshape(64, 64), "shape_mismatch", id="shape"),
        pytest.param(lambda o: o.double(), "dtype_mismatch", id="dtype"),
        pytest.param(
            lambda o: o.index_fill(0, torch.tensor([5]), float("nan")), "nan_mismatch", id="nan-added"
        ),
        pytest.param(
            lambda o: o.index_fill(0, torch.tensor([5]), float("inf")), "nan_mismatch", id="inf-added"
        ),
        pytest.param(lambda o: o.index_fill(0, torch.tensor([7]), 1e3), "incorrect", id="one-wrong-element"),
        pytest.param(lambda o: [o], "shape_mismatch", id="list-instead-of-tensor"),
        pytest.param(lambda o: (o, o), "shape_mismatch", id="two-outputs"),
    ],
)
def test_it_names_the_failure(mutate, kind: str) -> None:
    ref = _ref()
    result = compare_outputs(mutate(ref.clone()), ref, has_dot=False)
    assert not result.ok
    assert result.kind == kind


def test_one_wrong_element_in_a_million_is_caught_by_the_elementwise_check() -> None:
    ref = _ref(n=1 << 20)
    out = ref.clone()
    out[12345] += 0.05  # invisible to a relative L2 check over 2^20 elements (~5e-5)
    result = compare_outputs(out, ref, has_dot=True)
    assert not result.ok and result.bad_elements == 1
    assert result.rel_l2_err < TOLERANCES[("float32", True)].l2


def test_nan_and_inf_in_the_same_places_pass() -> None:
    ref = _ref()
    ref[3], ref[4], ref[5] = float("nan"), float("inf"), -float("inf")
    assert compare_outputs(ref.clone(), ref, has_dot=False).ok
    swapped = ref.clone()
    swapped[4], swapped[5] = -float("inf"), float("inf")
    assert compare_outputs(swapped, ref, has_dot=False).kind == "nan_mismatch"


@pytest.mark.parametrize(
    "scale", [pytest.param(1e-6, id="tiny"), pytest.param(1.0, id="unit"), pytest.param(1e6, id="huge")]
)
def test_the_tolerance_is_scale_free(scale: float) -> None:
    ref = _ref() * scale
    assert compare_outputs(_perturb(ref, 1e-6), ref, has_dot=False).ok
    assert not compare_outputs(_perturb(ref, 1e-2), ref, has_dot=False).ok


def test_an_all_zero_reference_needs_near_zero_output() -> None:
    ref = torch.zeros(100)
    assert compare_outputs(torch.zeros(100), ref, has_dot=False).ok
    assert not compare_outputs(torch.full((100,), 1e-2), ref, has_dot=False).ok


def test_integer_outputs_are_exact() -> None:
    ref = torch.arange(10)
    assert compare_outputs(ref.clone(), ref, has_dot=False).ok
    wrong = ref.clone()
    wrong[2] = 0
    assert compare_outputs(wrong, ref, has_dot=False).kind == "incorrect"


def test_unchanged_fraction() -> None:
    a, b = _ref(seed=0), _ref(seed=1)
    assert unchanged_fraction(a, b, a, b, has_dot=False) == 0.0  # an honest kernel
    assert unchanged_fraction(a, a, a, b, has_dot=False) == 1.0  # a cached answer
    assert unchanged_fraction(a, b, a, a.clone(), has_dot=False) is None  # the reference did not change


INF, NAN = float("inf"), float("nan")


def _unchanged_by_definition(out_a, out_b, ref_a, ref_b, tol) -> float | None:
    """The docstring's definition, element by element in float64, for the test below."""
    a, b = ref_a.double(), ref_b.double()
    both = torch.isfinite(a) & torch.isfinite(b)
    scale = float(a[both].square().mean().sqrt()) if bool(both.any()) else 1.0
    changed = both & ((a - b).abs() > tol.atol * (scale or 1.0) + tol.rtol * a.abs())
    same = (out_a == out_b) | (torch.isnan(out_a) & torch.isnan(out_b))
    return None if not bool(changed.any()) else int((changed & same).sum()) / int(changed.sum())


@pytest.mark.parametrize("chunk", [pytest.param(7, id="chunks-of-7"), pytest.param(1 << 20, id="one-chunk")])
@pytest.mark.parametrize(
    "where",
    [
        pytest.param({}, id="all-finite"),
        pytest.param({"ref_a": [(3, INF), (40, NAN)], "ref_b": [(41, -INF)]}, id="references-with-inf-and-nan"),
        pytest.param({"out_a": [(4, NAN), (6, NAN)], "out_b": [(4, NAN)]}, id="outputs-with-nan"),
    ],
)
def test_unchanged_fraction_counts_by_its_definition(
    monkeypatch: pytest.MonkeyPatch, chunk: int, where: dict[str, list[int]]
) -> None:
    """Its fast path (every value finite, told by one sum) and its slow one give the definition's
    figure."""
    monkeypatch.setattr("runner.compare.CHUNK", chunk)
    torch.manual_seed(0)
    ref_a = (torch.randn(100).clamp(-3, 3) * 2e4).to(torch.float16)
    ref_b = ref_a.clone()
    ref_b[::2] = (torch.randn(50).clamp(-3, 3) * 2e4).to(torch.float16)
    out_a, out_b = ref_a.clone(), ref_b.clone()
    out_b[:20] = out_a[:20]  # stayed put on 10 of the 50 changed elements
    tensors = {"ref_a": ref_a, "ref_b": ref_b, "out_a": out_a, "out_b": out_b}
    for name, places in where.items():
        for place, value in places:
            tensors[name][place] = value
    expected = _unchanged_by_definition(out_a, out_b, ref_a, ref_b, tolerance_for(torch.float16, False))
    assert expected is not None and 0.0 < expected < 1.0
    assert unchanged_fraction(out_a, out_b, ref_a, ref_b, has_dot=False) == pytest.approx(expected)


@pytest.mark.parametrize("chunk", [pytest.param(7, id="chunks-of-7"), pytest.param(1 << 20, id="one-chunk")])
def test_the_chunked_passes_judge_as_whole_tensors_do(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The comparison runs over chunks of the output: its figures are those of the whole tensor,
    whatever chunk an element falls in (the last, partial one included)."""
    monkeypatch.setattr("runner.compare.CHUNK", chunk)
    ref = _ref(n=1000).reshape(10, 100).to(torch.bfloat16)
    out = _perturb(ref.float(), 1e-3).to(torch.bfloat16)
    result = compare_outputs(out, ref, has_dot=False)
    o, r = out.double(), ref.double()
    assert result.ok and result.bad_elements == 0
    assert result.rel_l2_err == pytest.approx(float((o - r).norm() / r.norm()), rel=1e-6)
    assert result.max_abs_err == pytest.approx(float((o - r).abs().max()))
    out[9, 99] += 1.0  # in the last chunk of 7 (1000 = 142 * 7 + 6)
    wrong = compare_outputs(out, ref, has_dot=False)
    assert not wrong.ok and wrong.bad_elements == 1 and wrong.max_abs_err >= 0.9
    nan_ref = ref.clone()
    nan_ref[9, 98] = float("nan")
    assert compare_outputs(nan_ref.clone(), nan_ref, has_dot=False).ok
    assert compare_outputs(ref, nan_ref, has_dot=False).kind == "nan_mismatch"
    a, b = _ref(n=1000, seed=0), _ref(n=1000, seed=1)
    cached = b.clone()
    cached[994:] = a[994:]  # six elements, the last chunk of 7, stayed as they were
    assert unchanged_fraction(a, cached, a, b, has_dot=False) == pytest.approx(6 / 1000, abs=2e-3)


# ---------------------------------------------------------------- end to end, real sandbox


@pytest.fixture(scope="module")
def executor() -> Executor:
    return Executor("cpu")


@pytest.mark.parametrize(
    ("module", "checked"),
    [
        pytest.param("correct_add.py", ["case 0", "case 1", "verify 0"], id="elementwise"),
        pytest.param("correct_softmax.py", ["case 0", "verify 0"], id="row-softmax"),
        pytest.param("correct_matmul.py", ["case 0", "verify 0"], id="small-matmul"),
    ],
)
def test_correct_modules_pass_through_the_interpreter(
    executor: Executor, module: str, checked: list[str]
) -> None:
    outcome = executor.verify(str(MODULES / module), seeds=(0, 1))
    assert outcome.ok, outcome.error
    assert outcome.passed
    assert outcome.verdict is TimingVerdict.UNTIMED  # cpu: correct, never timed
    assert outcome.checked == checked
    assert outcome.timing is not None and not outcome.timing.timed
    for case in outcome.cases:
        assert case.correct and case.launches >= 1
        assert case.seeds == (0, 1)
        assert case.sensitivity == "changes with input"
    if module == "correct_matmul.py":
        assert outcome.cases[0].flops == 2 * 32 * 32 * 32
        assert outcome.cases[0].tolerance["l2"] == TOLERANCES[("float32", True)].l2


def test_cases_too_large_for_the_interpreter_are_skipped_and_named(executor: Executor) -> None:
    outcome = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,), options={"cpu_max_elements": 3000})
    assert outcome.passed
    assert outcome.checked == ["case 0", "verify 0"]
    assert [s["label"] for s in outcome.skipped] == ["case 1"]
    assert outcome.skipped[0]["numel"] == 4096


def test_each_case_says_what_the_autotuner_chose(executor: Executor, tmp_path: Path) -> None:
    """An autotuned candidate's verify result names the config chosen for each case (the
    interpreter takes the first config, which the LAUNCH_CONFIG rewrite makes the parent's)."""
    from diagnosis.engine.evidence import Family
    from diagnosis.engine.proposers.rules import apply_family
    from tests.engine.rules_cases import harness as h

    parent = MODULES / "correct_add.py"
    rw = apply_family(Family.LAUNCH_CONFIG, parent.read_text(), h.rule_input(h.cases_of(parent)))
    assert rw is not None and "@triton.autotune" in rw.source
    cand = tmp_path / "autotuned.py"
    cand.write_text(rw.source)
    outcome = executor.verify(str(parent), str(cand), seeds=(0,))
    assert outcome.passed, outcome.error
    assert outcome.cases
    for case in outcome.cases:
        assert case.autotune_choices == ("axpy_kernel: BLOCK=1024, num_warps=4, num_stages=3",)
    plain = executor.verify(str(parent), seeds=(0,))
    assert all(c.autotune_choices == () for c in plain.cases)  # nothing autotuned, nothing said


def test_each_case_records_its_integer_launch_arguments(executor: Executor) -> None:
    """Sizes the rules proposer cannot work out from input shapes come from the launches."""
    outcome = executor.verify(str(MODULES / "correct_add.py"), seeds=(0,))
    assert outcome.passed, outcome.error
    ints = {c.label: c.launch_ints for c in outcome.cases}
    assert ints["case 1"] == {"axpy_kernel": {"n": 2048}}
    assert ints["verify 0"] == {"axpy_kernel": {"n": 17}}  # alpha (a float) is not an integer
    assert outcome.profile is None  # nothing timed on cpu: no profile from the gate


def test_each_case_records_its_first_seeds_launches_for_tier_1(executor: Executor) -> None:
    result = gate_result(executor, "correct_add.py", [0, 1])
    assert result["passed"]
    launches = {c["label"]: c["launch_info"] for c in result["cases"]}
    assert launches["case 1"] == [{"kernel": "axpy_kernel", "grid": [2, 1, 1], "num_warps": 4, "num_stages": 3}]


def gate_result(executor: Executor, name: str, seeds: list[int]) -> dict:
    """The trusted side's raw verify result (what Executor.verify turns into its outcome),
    piece by piece: the reference job, the plan, the verify job, the judgement."""
    from runner import gate

    path = str(MODULES / name)
    opts = {"time": False}
    key = gate.GateStore.key(path, "cpu", None, opts)

    def request(need: gate.Need):
        extra = {"timed_seeds": need.timed_seeds, "alt_seeds": need.alt_seeds}
        return executor._request("reference", path, seeds=need.seeds, options={**opts, **extra})

    ref, failed = executor.gate.reference(lambda r, w: executor.run(r, workdir=w), request, key, seeds, opts)
    assert ref is not None, failed
    plan = gate.plan(ref, seeds, opts, decision=False)
    jobdir = Path(tempfile.mkdtemp(prefix="kernelopt-test-"))
    try:
        gate.stage_inputs(plan, jobdir)
        request_v = executor._request("verify", path, seeds=seeds, options={**opts, "gate": plan.to_json()})
        response = executor.run(request_v, workdir=jobdir)
        return gate.judge(ref, plan, response, jobdir).result
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)


def test_a_timed_gate_is_also_the_profile_of_the_version_under_test() -> None:
    from runner.execute import timing_comparison, verify_profile

    raw = _raw_timing([0.64, 0.63, 0.64], [0.19, 0.20, 0.19])
    info = [{"kernel": "k", "grid": [64, 1, 1], "num_warps": 8, "num_stages": 2}]
    result = {"timing": raw, "cases": [{"label": "case 0", "kind": "timed", "index": 0, "launch_info": info}]}
    profile = verify_profile(result, timing_comparison(raw))
    assert profile is not None and profile.device is not None and profile.device.name == "NVIDIA H200"
    (case,) = profile.cases
    assert case.time_ms == pytest.approx(0.19) and case.ref_time_ms == pytest.approx(0.2)
    assert case.launches[0].grid == (64, 1, 1) and case.launches[0].num_warps == 8
    assert case.sol_ms == pytest.approx(3 * 2**28 / 4800e9 * 1e3) and case.pct_sol is not None
    # a case without its launches, or launches that are not launch records: no profile
    assert verify_profile({**result, "cases": []}, timing_comparison(raw)) is None
    bad = {**result, "cases": [{**result["cases"][0], "launch_info": [{"kernel": "k", "grid": "x"}]}]}
    assert verify_profile(bad, timing_comparison(raw)) is None
    assert verify_profile(result, timing_comparison({"timed": False, "reason": "cpu"})) is None


def test_a_candidate_is_judged_against_the_parents_model(executor: Executor) -> None:
    outcome = executor.verify(
        str(MODULES / "correct_add.py"), str(MODULES / "candidate_redefines_model.py"), seeds=(0,)
    )
    assert not outcome.passed
    assert outcome.reason == "incorrect"
    assert outcome.verdict is TimingVerdict.FAILED
    assert outcome.cases and not outcome.cases[-1].correct


# ---------------------------------------------------------------- the parent's policy on raw timings


def _raw_timing(parent: list[float] | None, candidate: list[float], nbytes: int = 3 * 2**28) -> dict:
    return {
        "timed": True,
        "device": {"name": "NVIDIA H200", "kind": "cuda", "sm_count": 132, "l2_mb": 60.0},
        "rounds": len(candidate),
        "cases": [{"index": 0, "label": "case 0", "parent_ms": parent, "candidate_ms": candidate,
                   "reference_ms": [0.2], "bytes": nbytes, "flops": 0, "dtype": "float32"}],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("parent", "candidate", "verdict", "faster", "suspect"),
    [
        pytest.param(
            [0.64, 0.63, 0.64], [0.19, 0.19, 0.19], TimingVerdict.IMPROVED, True, False, id="three-times-faster"
        ),
        pytest.param(
            [0.20, 0.21, 0.20], [0.198, 0.199, 0.198], TimingVerdict.NO_GAIN, False, False, id="inside-the-floor"
        ),
        pytest.param([0.20, 0.20, 0.20], [0.25, 0.25, 0.25], TimingVerdict.SLOWER, False, False, id="slower"),
        pytest.param([0.64, 0.64], [0.10, 0.10], TimingVerdict.SUSPECT, False, True, id="below-the-speed-of-light"),
    ],
)
def test_timing_comparison(parent: list[float], candidate: list[float], verdict: TimingVerdict, faster: bool,
                           suspect: bool) -> None:  # fmt: skip
    from runner.execute import timing_comparison

    timing = timing_comparison(_raw_timing(parent, candidate))
    assert timing is not None and timing.timed and timing.baseline == "parent"
    assert (timing.verdict, timing.faster, timing.suspect) == (verdict, faster, suspect)
    case = timing.cases[0]
    assert case.sol_ms == pytest.approx(3 * 2**28 / 4800e9 * 1e3)
    assert case.noise_floor >= 0.01
    assert case.parent_ms == pytest.approx(median(parent))
    assert case.candidate_ms == pytest.approx(median(candidate))


def test_without_a_parent_the_baseline_is_pytorch_eager() -> None:
    from runner.execute import timing_comparison

    timing = timing_comparison(_raw_timing(None, [0.19, 0.19]))
    assert timing is not None and timing.baseline == "reference"
    assert timing.cases[0].speedup == pytest.approx(0.2 / 0.19)
    assert timing_comparison({"timed": False, "reason": "no device"}).verdict is TimingVerdict.UNTIMED  # type: ignore[union-attr]


def test_finiteness_is_told_by_a_sum_and_checked_where_the_sum_overflows() -> None:
    from runner.compare import _finite

    big = torch.full((10,), 3e38)  # finite, but their float32 sum is not
    assert _finite(big) and _finite(big.to(torch.bfloat16))
    for value in (float("nan"), float("inf"), -float("inf")):
        broken = big.clone()
        broken[7] = value
        assert not _finite(broken) and not _finite(torch.tensor([0.0, value]))
