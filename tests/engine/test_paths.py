"""Server paths out of stored text (diagnosis.engine.paths): each case is a real line shape."""

from __future__ import annotations

import pytest

from diagnosis.engine.paths import PROJECT_ROOT, display_name, has_server_path, scrub_paths

SCRUBBED = [
    pytest.param(
        '#loc8 = loc("/tmp/kernelopt-loop-g83ianiq/v_65aabc8c202f3ebc.py":15:16)',
        '#loc8 = loc("add.py":15:16)',
        id="mlir-loc-of-the-loop-module",
    ),
    pytest.param(
        '\t.file\t1 "/tmp/kernelopt-loop-g83ianiq/v_65aabc8c202f3ebc.py"',
        '\t.file\t1 "add.py"',
        id="ptx-file",
    ),
    pytest.param(
        '\t.file\t2 "/work/main/.venv/lib/python3.11/site-packages/triton/language/standard.py"',
        '\t.file\t2 "triton/language/standard.py"',
        id="ptx-file-of-triton-under-the-venv",
    ),
    pytest.param(
        '!1 = !DIFile(filename: "v_65aabc8c202f3ebc.py", directory: "/tmp/kernelopt-loop-g83ianiq")',
        '!1 = !DIFile(filename: "add.py", directory: ".")',
        id="llvm-difile-split-name-and-directory",
    ),
    pytest.param(
        "\t.loc\t2 170 27  // standard.py:170:27 @[ v_65aabc8c202f3ebc.py:18:19 ]",
        "\t.loc\t2 170 27  // standard.py:170:27 @[ add.py:18:19 ]",
        id="ptx-inlining-comment",
    ),
    pytest.param(
        "this interpreter (/work/main/.venv/bin/python) has triton 3.6.0",
        "this interpreter (python) has triton 3.6.0",
        id="the-interpreter-in-a-message",
    ),
    pytest.param(
        f'  File "{PROJECT_ROOT}/runner/childlib/compile.py", line 12',
        '  File "runner/childlib/compile.py", line 12',
        id="the-project-checkout-becomes-relative",
    ),
    pytest.param("/root/.triton/cache/abc/k.json missing", "k.json missing", id="root-home"),
]

KEPT = [
    pytest.param("offs = pid * BLOCK + tl.arange(0, BLOCK)  # a/b", id="division-in-source"),
    pytest.param("        /*0120*/  @!P1 LDG.E.128 R4, desc[UR6][R28.64] ;", id="sass-address-comment"),
    pytest.param("\t// .globl\tadd_kernel", id="ptx-comment"),
    pytest.param("see http://127.0.0.1:8000/runs/12/evidence/", id="an-url-path"),
    pytest.param("/opaque/thing is not a server root", id="an-unknown-root"),
]


@pytest.mark.parametrize(("text", "expected"), SCRUBBED)
def test_it_replaces_server_paths(text: str, expected: str) -> None:
    assert scrub_paths(text, "add.py") == expected
    assert not has_server_path(expected)
    assert scrub_paths(expected, "add.py") == expected  # idempotent: old rows may be scrubbed twice


@pytest.mark.parametrize("text", KEPT)
def test_it_leaves_other_slashes_alone(text: str) -> None:
    assert scrub_paths(text, "add.py") == text


def test_it_keeps_the_line_count() -> None:
    text = '"/tmp/x/v_0123456789abcdef.py"\n\n/usr/lib/python3.11/ast.py\n'
    assert scrub_paths(text).count("\n") == text.count("\n")


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        pytest.param("vadd.py", "vadd.py", id="plain"),
        pytest.param("/home/u/k/vadd.py", "vadd.py", id="a-path"),
        pytest.param("", "kernel.py", id="none"),
        pytest.param("my kernel (1).py", "my_kernel__1_.py", id="odd-characters"),
        pytest.param("notes.txt", "kernel.py", id="not-python"),
    ],
)
def test_display_name(filename: str, expected: str) -> None:
    assert display_name(filename) == expected
