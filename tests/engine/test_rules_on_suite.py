"""Every applicable rules transform, applied to every benchmark-suite module, must still pass
the interpreter check (bench/check_suite.py's comparison) with every autotune config.

Slow: it runs the interpreter on a few dozen rewritten modules. Skipped when the suite is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosis.engine import sol
from diagnosis.engine.evidence import Family
from diagnosis.engine.proposers.base import ProposalContext
from diagnosis.engine.proposers.rules import RuleInput, apply_family
from tests.engine.rules_cases import harness as h

pytestmark = pytest.mark.slow

SUITE_FILES = sorted(p for p in h.SUITE.glob("*.py") if re.match(r"\d\d_\w+\.py$", p.name)) if h.SUITE.is_dir() else []

CHAINS = [
    pytest.param((Family.LAUNCH_CONFIG,), id="launch_config"),
    pytest.param((Family.SWIZZLE, Family.LAUNCH_CONFIG), id="swizzle+launch_config"),
    pytest.param((Family.SINGLE_PASS,), id="single_pass"),
    pytest.param((Family.SINGLE_PASS, Family.LAUNCH_CONFIG), id="single_pass+launch_config"),
    pytest.param((Family.BLOCK_REDUCTION,), id="block_reduction"),
    pytest.param((Family.HINTS,), id="hints"),
    pytest.param((Family.MASKING,), id="masking"),
    pytest.param((Family.FUSION, Family.LAUNCH_CONFIG), id="fusion+launch_config"),
    pytest.param((Family.FUSION, Family.SINGLE_PASS), id="fusion+single_pass"),
    # a second fusion on the first's result, as a later round proposes it (37: the fused
    # element-wise pair, then its row broadcast into the row-mean kernel)
    pytest.param((Family.FUSION, Family.FUSION), id="fusion+fusion"),
]


H200 = sol.lookup("NVIDIA H200").spec

# The layer sizes of the two linear modules and the 1x1 convolution, cut for the interpreter
# check only (written into the rewritten file after the rewrite, which reads the H200 cases of
# the original): K and N of 512-2048 made each of their eight GEMM configs a large share of this
# file's time (the convolution's eight: 13.6 of the 47 s of the LAUNCH_CONFIG chain), and these
# leave a remainder at every BLOCK_K and BLOCK_N of the GEMM space, so the masks at the K and N
# edges run too.
INTERP_SIZES = {
    "20_linear_bias_relu_fp16": ("IN_FEATURES, OUT_FEATURES = 1024, 2048", "IN_FEATURES, OUT_FEATURES = 200, 136"),
    "21_linear_gelu_fp16": ("IN_FEATURES, OUT_FEATURES = 2048, 1024", "IN_FEATURES, OUT_FEATURES = 136, 200"),
    "36_conv1x1_relu_fp16": ("IN_CHANNELS, OUT_CHANNELS = 512, 1024", "IN_CHANNELS, OUT_CHANNELS = 136, 200"),
}


def _rewrite(path: Path, chain: tuple[Family, ...]) -> str | None:
    """The chain's rewrite as the H200 benchmark would propose it. A LAUNCH_CONFIG rewrite that
    keeps the fixed launch for launch-bound sizes gets its limit set to -1 here: the verify
    inputs are small and would otherwise all take the fixed launch, the parent's own."""
    source = path.read_text()
    inp = RuleInput((), ProposalContext(cases=h.cases_of(path), device=H200))
    for family in chain:
        rw = apply_family(family, source, inp)
        if rw is None:
            return None
        source = rw.source
    return re.sub(r"^(\w+_FIXED_UP_TO) = [\d_]+$", r"\1 = -1", source, flags=re.M)


@pytest.mark.skipif(not SUITE_FILES, reason="bench/suite is absent")
@pytest.mark.parametrize("chain", CHAINS)
def test_rewritten_suite_modules_pass_the_interpreter_check(chain: tuple[Family, ...], tmp_path: Path) -> None:
    paths = []
    for path in SUITE_FILES:
        new = _rewrite(path, chain)
        if new is None:
            continue
        assert h.parses(new)
        if path.stem in INTERP_SIZES:
            new = h.variant(new, INTERP_SIZES[path.stem])
        out = tmp_path / path.name
        out.write_text(new)
        paths.append(out)
    print(f"{'+'.join(map(str, chain))} applies to: {', '.join(p.stem for p in paths) or 'nothing'}")
    if not paths:
        pytest.skip("no suite module matches")
    results = h.interp_check(paths, jobs=2)
    failed = {p.stem: results[str(p)]["message"][-1500:] for p in paths if not results[str(p)]["ok"]}
    assert not failed, failed
