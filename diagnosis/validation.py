"""Static checks on an uploaded kernel module (DESIGN.md section 1), without importing it.

Plain Python (no Django): the web process, the engine and the command line all call
`validate_module_source`. The file is never executed here; `ast` tells whether it has the
names the harness needs, and the engine's source model (the one tier 0 and the rules read)
which of its functions are Triton kernels. Every error carries a stable code and, where
there is one, the line it is about.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

from diagnosis.engine.srcmodel import SourceModelError, model_of

REQUIRED_CLASSES = ("Model", "ModelNew")
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")

@dataclass(frozen=True)
class ValidationError:
    """One reason the module cannot be diagnosed; `line` is 1-based, None for the whole file."""

    code: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "whole file"
        return f"{where}: {self.message}"


@dataclass
class ValidationResult:
    filename: str
    errors: list[ValidationError] = field(default_factory=list)
    source: str | None = None  # the decoded text, when the bytes were UTF-8
    sha256: str | None = None  # of `source` encoded as UTF-8 (matches KernelVersion.digest)
    jit_functions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def codes(self) -> list[str]:
        return [e.code for e in self.errors]


def validate_module_source(source: str | bytes, filename: str, max_bytes: int) -> ValidationResult:
    """Check an uploaded module: size, text, syntax, required names, a Triton kernel.

    The size bound is checked before anything is decoded or parsed, so an oversized upload
    costs nothing. Checks stop at the first of size / text / syntax errors; after a
    successful parse, every structural problem is reported at once.
    """
    result = ValidationResult(filename=filename)
    if isinstance(source, str):
        # A str of n characters is at least n bytes; only encode when it might fit.
        if len(source) > max_bytes:
            return _fail(result, "too_large", _too_large(len(source), max_bytes, at_least=True))
        try:
            raw = source.encode("utf-8")
        except UnicodeEncodeError as exc:
            return _fail(result, "not_text", f"the text is not valid Unicode ({exc.reason})")
    else:
        raw = bytes(source)
    if len(raw) > max_bytes:
        return _fail(result, "too_large", _too_large(len(raw), max_bytes))

    if b"\x00" in raw:
        line = raw.count(b"\n", 0, raw.index(b"\x00")) + 1
        return _fail(
            result, "not_text", "this is a binary file (it contains NUL bytes), not Python source", line
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return _fail(
            result,
            "not_text",
            f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "upload the Python source file",
            line,
        )
    result.source = text
    result.sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if not text.strip():
        return _fail(result, "empty", "the file is empty")

    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        column = f", column {exc.offset}" if exc.offset else ""
        return _fail(
            result, "syntax_error", f"syntax error: {exc.msg} (line {exc.lineno}{column})", exc.lineno
        )
    except (RecursionError, MemoryError):
        return _fail(result, "syntax_error", "the file is too deeply nested to parse")

    result.errors.extend(_check_required_names(tree))
    try:
        # the model decides what a kernel is for every reader: any alias, any decorator stack
        result.jit_functions = [k.name for k in model_of(text).all_kernels]
    except SourceModelError as exc:
        return _fail(result, "syntax_error", f"the module uses syntax the rewriter cannot read: {exc}")
    if not result.jit_functions:
        result.errors.append(
            ValidationError(
                "no_triton_kernel",
                "no function is decorated with @triton.jit; ModelNew must launch a Triton kernel defined in this file",
            )
        )
    return result


def _fail(result: ValidationResult, code: str, message: str, line: int | None = None) -> ValidationResult:
    result.errors.append(ValidationError(code, message, line))
    return result


def _too_large(size: int, max_bytes: int, at_least: bool = False) -> str:
    qualifier = "at least " if at_least else ""
    return f"the file is too large: {qualifier}{size} bytes, the limit is {max_bytes} bytes"


@dataclass(frozen=True)
class _Binding:
    kind: str  # class, function, other (assignment or import: its kind cannot be known statically)
    line: int
    direct: bool  # a statement of the module body, not inside an if/try/with block


def _bindings(body: list[ast.stmt], direct: bool = True) -> dict[str, list[_Binding]]:
    """Top-level names bound by class/def/assignment/import, including inside if/try/with blocks."""
    found: dict[str, list[_Binding]] = {}

    def add(name: str, binding: _Binding) -> None:
        found.setdefault(name, []).append(binding)

    for node in body:
        if isinstance(node, ast.ClassDef):
            add(node.name, _Binding("class", node.lineno, direct))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            add(node.name, _Binding("function", node.lineno, direct))
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name_node in ast.walk(target):
                    if isinstance(name_node, ast.Name):
                        add(name_node.id, _Binding("other", node.lineno, direct))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                add(bound, _Binding("other", node.lineno, direct))
        else:
            nested: list[list[ast.stmt]] = []
            if isinstance(node, ast.If | ast.For | ast.While):
                nested = [node.body, node.orelse]
            elif isinstance(node, ast.With):
                nested = [node.body]
            elif isinstance(node, ast.Try | ast.TryStar):
                nested = [node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]]
            for block in nested:
                for name, items in _bindings(block, direct=False).items():
                    found.setdefault(name, []).extend(items)
    return found


def _check_required_names(tree: ast.Module) -> list[ValidationError]:
    errors: list[ValidationError] = []
    bindings = _bindings(tree.body)
    wanted = [(n, "class") for n in REQUIRED_CLASSES] + [(n, "function") for n in REQUIRED_FUNCTIONS]
    for name, kind in wanted:
        found = bindings.get(name)
        if not found:
            article = "a class" if kind == "class" else "a top-level function"
            errors.append(ValidationError("missing_name", f"the module does not define {name} ({article})"))
            continue
        direct_defs = [b for b in found if b.direct and b.kind in ("class", "function")]
        if len(direct_defs) > 1:
            lines = ", ".join(str(b.line) for b in direct_defs)
            errors.append(
                ValidationError(
                    "duplicate_name",
                    f"{name} is defined {len(direct_defs)} times (lines {lines}); only the last one counts, keep one",
                    direct_defs[-1].line,
                )
            )
        last = max(found, key=lambda b: b.line)  # Python keeps the binding executed last
        if last.kind not in (kind, "other"):
            should = (
                "a class (class " + name + "(nn.Module): ...)"
                if kind == "class"
                else "a function (def " + name + "(): ...)"
            )
            errors.append(
                ValidationError(
                    "wrong_kind",
                    f"{name} must be {should}, but it is defined as a {last.kind}",
                    last.line,
                )
            )
    return errors
