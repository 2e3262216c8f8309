"""Source-line maps of every stage on real compiles for sm_90 on this CPU (the compile job,
runner.childlib.compile): each case names a line and what each stage must show for it."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from diagnosis.engine.irmap import kernel_filename, map_stages
from diagnosis.engine.paths import scrub_paths
from runner.childlib.compile import compile_job
from runner.protocol import JobRequest

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


@functools.cache
def stages(name: str) -> dict[str, str]:
    data = compile_job(JobRequest(job="compile", module=str(KERNELS / f"{name}.py"), target="sm_90"))
    [kernel] = json.loads(json.dumps(data))["kernels"]
    # as runner.persist stores them: the project's paths made relative, triton's inside site-packages
    return {k: scrub_paths(v, f"{name}.py") for k, v in kernel["stages"].items()}


def ops(name: str, stage: str, line: int) -> list[str]:
    m = map_stages(stages(name))[stage]
    return [m.lines[n - 1].strip() for n in m.by_source.get(line, ())]


CASES = [
    pytest.param("vadd_unaligned", 15, "ttir", r"tt\.load ", 1, id="load-ttir"),
    pytest.param("vadd_unaligned", 15, "llir", r"load .*addrspace\(1\)|ld\.global", 1, id="load-llir"),
    pytest.param("vadd_unaligned", 15, "ptx", r"ld\.global\.b32", 8, id="scalar-load-ptx"),
    pytest.param("vadd_unaligned", 15, "sass", r"\bLDG\.E\b", 1, id="load-sass"),
    pytest.param("vadd_aligned", 15, "ptx", r"ld\.global\.v4\.b32", 2, id="vector-load-ptx"),
    pytest.param("vadd_aligned", 15, "sass", r"\bLDG\.E\.128\b", 1, id="vector-load-sass"),
    pytest.param(
        "matmul_pipelined", 25, "ttgir", r"ttg\.async_copy_global_to_local", 1, id="pipelined-load-ttgir"
    ),
    pytest.param("matmul_pipelined", 25, "ptx", r"cp\.async\.cg\.shared\.global", 1, id="pipelined-load-ptx"),
    pytest.param("matmul_pipelined", 25, "sass", r"LDGSTS", 1, id="pipelined-load-sass"),
    pytest.param("matmul_pipelined", 27, "ttgir", r"ttng\.warp_group_dot", 1, id="dot-ttgir"),
    pytest.param("matmul_pipelined", 27, "ptx", r"wgmma\.mma_async", 1, id="dot-ptx"),
    pytest.param("matmul_pipelined", 27, "sass", r"HGMMA", 1, id="dot-sass"),
    # tl.sum is triton/language/standard.py: each stage gives its code to the calling line
    pytest.param("softmax_warps", 20, "ttgir", r"arith\.addf", 1, id="reduction-body-ttgir"),
    pytest.param("softmax_warps", 20, "ptx", r"shfl\.sync\.bfly", 1, id="reduction-ptx"),
    pytest.param("softmax_warps", 20, "sass", r"\bFADD\b", 1, id="reduction-sass-through-ptx-chains"),
]


@pytest.mark.parametrize(("name", "line", "stage", "pattern", "least"), CASES)
def test_each_stage_shows_the_code_of_the_line(
    name: str, line: int, stage: str, pattern: str, least: int
) -> None:
    found = [t for t in ops(name, stage, line) if re.search(pattern, t)]
    assert len(found) >= least, ops(name, stage, line)[:20]


def test_the_kernels_file_is_found_in_the_stored_text() -> None:
    assert kernel_filename(stages("vadd_unaligned")) == "tests/kernels/vadd_unaligned.py"


def test_library_lines_in_sass_say_where_they_came_from() -> None:
    m = map_stages(stages("softmax_warps"))["sass"]
    via = {m.via[n] for n in m.by_source[20] if n in m.via}
    assert via and all(v.startswith("triton/language/standard.py:") for v in via)


def test_no_stage_line_of_another_line_leaks_in() -> None:
    # the load of x (line 15) and of y (line 16) are separate in every stage
    for stage in ("ttir", "ptx", "sass"):
        m = map_stages(stages("vadd_unaligned"))[stage]
        assert not set(m.by_source[15]) & set(m.by_source[16]), stage
