"""Upload validation: a table of files, each with the error code and line it must give."""

from __future__ import annotations

import pytest

from diagnosis.validation import validate_module_source
from tests.conftest import GOOD_SOURCE

MAX = 64 * 1024


def _without(name: str) -> str:
    """GOOD_SOURCE with the top-level definition of `name` renamed away."""
    return GOOD_SOURCE.replace(f"def {name}(", f"def _{name}(").replace(f"class {name}(", f"class _{name}(")


GOOD = [
    pytest.param(GOOD_SOURCE, id="plain-triton-jit"),
    pytest.param(GOOD_SOURCE.encode(), id="bytes"),
    pytest.param(b"\xef\xbb\xbf" + GOOD_SOURCE.encode(), id="utf8-bom"),
    pytest.param(
        GOOD_SOURCE.replace("import triton\n", "import triton\nfrom triton import jit\n").replace(
            "@triton.jit", "@jit"
        ),
        id="from-triton-import-jit",
    ),
    pytest.param(GOOD_SOURCE.replace("@triton.jit", "@triton.jit(do_not_specialize=['n'])"), id="jit-call"),
    pytest.param(
        GOOD_SOURCE.replace("import triton\n", "import triton as tr\n")
        .replace("@triton.jit", "@tr.jit")
        .replace("triton.cdiv", "tr.cdiv"),
        id="aliased-module",
    ),
    pytest.param(
        GOOD_SOURCE.replace("@triton.jit", "@triton.autotune(configs=[], key=['n'])\n@triton.jit"),
        id="autotune-over-jit",
    ),
    pytest.param(GOOD_SOURCE + "\nget_input_cases = lambda: [get_inputs()]\n", id="optional-lambda"),
    pytest.param(
        GOOD_SOURCE.replace(
            "def get_inputs():\n    return [torch.randn(1000)]\n", "from helpers import get_inputs\n"
        ),
        id="required-function-imported",
    ),
]


@pytest.mark.parametrize("source", GOOD)
def test_it_accepts_valid_modules(source):
    result = validate_module_source(source, "kernel.py", MAX)
    assert result.errors == []
    assert result.ok
    assert result.jit_functions == ["double_kernel"]
    assert result.source is not None and "class ModelNew" in result.source
    assert not result.source.startswith("\ufeff")


BAD = [
    pytest.param(b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "not_text", 1, id="binary-elf"),
    pytest.param(b"\x89PNG\r\n\x1a\n", "not_text", 1, id="binary-png-not-utf8"),
    pytest.param(b"# ok\n# still ok\nx = '\xff'\n", "not_text", 3, id="latin1-byte-line-3"),
    pytest.param(
        GOOD_SOURCE.replace("def get_inputs():", "def get_inputs(:"), "syntax_error", 27, id="syntax-error"
    ),
    pytest.param("   \n\n", "empty", None, id="empty"),
    pytest.param(_without("ModelNew"), "missing_name", None, id="no-ModelNew"),
    pytest.param(_without("get_inputs"), "missing_name", None, id="no-get_inputs"),
    pytest.param(_without("get_init_inputs"), "missing_name", None, id="no-get_init_inputs"),
    pytest.param(GOOD_SOURCE.replace("@triton.jit\n", ""), "no_triton_kernel", None, id="no-triton-jit"),
    pytest.param(
        GOOD_SOURCE.replace("@triton.jit", "@jit"), "no_triton_kernel", None, id="bare-jit-not-from-triton"
    ),
    pytest.param(
        GOOD_SOURCE.replace("@triton.jit", "@numba.jit"), "no_triton_kernel", None, id="other-libraries-jit"
    ),
    pytest.param(
        GOOD_SOURCE.replace(
            "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n",
            "def Model(x):\n    return x * 2\n",
        ),
        "wrong_kind",
        7,
        id="Model-as-a-function",
    ),
    pytest.param(
        GOOD_SOURCE.replace("def get_init_inputs():\n    return []\n", "class get_init_inputs:\n    pass\n"),
        "wrong_kind",
        31,
        id="get_init_inputs-as-a-class",
    ),
    pytest.param(
        GOOD_SOURCE + "\n\ndef get_inputs():\n    return [torch.randn(10)]\n",
        "duplicate_name",
        35,
        id="get_inputs-defined-twice-reports-the-last",
    ),
]


@pytest.mark.parametrize(("source", "code", "line"), BAD)
def test_it_rejects_bad_modules_with_code_and_line(source, code, line):
    result = validate_module_source(source, "kernel.py", MAX)
    assert not result.ok
    assert code in result.codes
    error = next(e for e in result.errors if e.code == code)
    assert error.line == line
    assert str(error).startswith(f"line {line}:" if line else "whole file:")


def test_it_names_each_missing_definition():
    source = _without("ModelNew").replace("def get_inputs(", "def other(")
    result = validate_module_source(source, "kernel.py", MAX)
    messages = " ".join(e.message for e in result.errors if e.code == "missing_name")
    assert "ModelNew" in messages and "get_inputs" in messages
    assert result.codes.count("missing_name") == 2


def test_syntax_error_names_line_and_column():
    result = validate_module_source("x = 1\ny = (\n", "kernel.py", MAX)
    (error,) = result.errors
    assert error.code == "syntax_error"
    assert error.line == 2
    assert "column" in error.message


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(b"#" * (MAX + 1), id="bytes"),
        pytest.param("#" * (MAX + 1), id="str"),
        pytest.param("é" * (MAX // 2 + 1), id="str-multibyte-over-in-bytes-only"),
    ],
)
def test_it_rejects_oversized_files_before_decoding(source):
    result = validate_module_source(source, "kernel.py", MAX)
    assert result.codes == ["too_large"]
    assert result.errors[0].line is None
    assert result.source is None  # never decoded


def test_oversized_binary_is_reported_as_too_large_not_binary():
    result = validate_module_source(b"\x00\xff" * MAX, "blob.bin", MAX)
    assert result.codes == ["too_large"]


def test_the_name_of_the_file_does_not_matter():
    assert validate_module_source(GOOD_SOURCE, "kernel.txt", MAX).ok
    assert validate_module_source(GOOD_SOURCE, "", MAX).ok


def test_digest_matches_the_stored_version_digest():
    from diagnosis.models import KernelVersion

    result = validate_module_source(b"\xef\xbb\xbf" + GOOD_SOURCE.encode(), "k.py", MAX)
    assert result.sha256 == KernelVersion.digest(GOOD_SOURCE)


def test_module_imports_no_django():
    import subprocess
    import sys

    code = (
        "import sys; import diagnosis.validation as v; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django imported'; "
        "print(v.validate_module_source('x=1', 'a.py', 100).codes)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "missing_name" in out.stdout
