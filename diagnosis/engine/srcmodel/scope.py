"""Which statements bind a module's names: the module body's, and those its `if`, `try` and
`with` blocks run at import.

Plain libcst; read by the names, the kernels, the call graph and the rules (srcmodel.read
re-exports it), and, by line, by the ast-side readers (tier 0).
"""

from __future__ import annotations

import libcst as cst


def module_statements(tree: cst.Module) -> list[cst.BaseStatement]:
    """The statements that bind the module's names, in source order: the module body's, and
    those inside its `if`/`elif`/`else`, `try` and `with` blocks (a kernel and its wrapper
    defined under `if triton.__version__ >= ...:`, a fallback import under `except`).

    Which branch of an `if` or `try` runs is not known here. The model reads the first one, the
    `if` branch (a version check's new path) or the `try` body with its `else` (the import that
    succeeded): a statement of a later alternative that binds a name an earlier alternative
    binds is left out, and one that binds no name of theirs is kept."""
    return [s for st in tree.body for s in _run_at_import(st)]


def every_module_statement(tree: cst.Module) -> list[cst.BaseStatement]:
    """`module_statements` with every alternative kept: each statement that may run at import,
    whichever branch of an `if` or `try` runs (a name bound in two branches, twice)."""
    return [s for st in tree.body for s in _run_at_import(st, every=True)]


def _run_at_import(st: cst.BaseStatement, every: bool = False) -> list[cst.BaseStatement]:
    if isinstance(st, cst.With):
        return [s for inner in statements(st.body) for s in _run_at_import(inner, every)]
    alternatives: list[cst.BaseSuite] = []
    always: list[cst.BaseSuite] = []
    if isinstance(st, cst.If):
        node: cst.If | cst.Else | None = st
        while isinstance(node, cst.If):
            alternatives.append(node.body)
            node = node.orelse
        if node is not None:
            alternatives.append(node.body)
    elif isinstance(st, cst.Try | cst.TryStar):
        main = [*statements(st.body), *(statements(st.orelse.body) if st.orelse else [])]
        alternatives = [cst.IndentedBlock(body=main), *(h.body for h in st.handlers)]
        always = [st.finalbody.body] if st.finalbody else []
    else:
        return [st]
    out: list[cst.BaseStatement] = []
    taken: set[str] = set()
    for block in alternatives:
        kept = [s for inner in statements(block) for s in _run_at_import(inner, every) if every or not binds(s) & taken]
        out.extend(kept)
        taken |= {name for s in kept for name in binds(s)}
    return out + [s for block in always for inner in statements(block) for s in _run_at_import(inner, every)]


def binds(st: cst.BaseStatement) -> set[str]:
    """The module-level names a simple statement, def or class binds (imports, assignments)."""
    if isinstance(st, cst.FunctionDef | cst.ClassDef):
        return {st.name.value}
    out: set[str] = set()
    for small in st.body if isinstance(st, cst.SimpleStatementLine) else ():
        targets: list[cst.BaseExpression] = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, cst.AugAssign) or (
            isinstance(small, cst.AnnAssign) and small.value is not None
        ):
            targets = [small.target]
        elif isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    out.add(alias.asname.name.value)
                else:
                    name = alias.name
                    while isinstance(name, cst.Attribute) and isinstance(small, cst.Import):
                        name = name.value
                    if isinstance(name, cst.Name):
                        out.add(name.value)
        out |= {n.value for t in targets for n in target_names(t)}
    return out


def target_names(node: cst.CSTNode) -> list[cst.Name]:
    """The names an assignment target binds: `a` and `b` of `a, b = ...`; an attribute binds none."""
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [n for e in node.elements for n in target_names(e.value)]
    return []


def statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of an indented block (none for a one-line suite)."""
    return list(block.body) if isinstance(block, cst.IndentedBlock) else []
