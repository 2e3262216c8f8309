"""Small helpers over Python's ast shared by upload validation and tier 0 (no execution)."""

from __future__ import annotations

import ast


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it stands for, from every absolute import in the file:
    `import triton.language as tl` gives tl -> triton.language, `from triton import jit`
    gives jit -> triton.jit, `import torch.nn` gives torch -> torch."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases
