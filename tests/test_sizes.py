"""Module and function sizes stay within what a reader can hold (issue 36).

A module of ``auditor`` has at most ``MODULE_LIMIT`` lines, all of them counted (the table
definitions, ``auditor/db/models.py``, are exempt). A function has at most
``FUNCTION_LIMIT`` *code lines* — lines holding a Python token other than a comment, so
leaving out blank lines, comment lines and docstrings — from its ``def`` line to its last
line, nested functions included, unless its docstring has a line starting with
``Long because`` that says why it is one indivisible piece (see docs/development.md).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "auditor"
MODULE_LIMIT = 800
FUNCTION_LIMIT = 80
EXEMPT_MODULES = {"auditor/db/models.py"}
REASON_PREFIX = "long because"

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> tuple[set[int], ast.Module]:
    """The numbers of the lines of ``source`` that hold code (no blank, comment or docstring)."""
    tree = ast.parse(source)
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _SKIP:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines - _docstring_lines(tree), tree


def _has_reason(node: ast.AST) -> bool:
    doc = ast.get_docstring(node) or ""
    return any(line.strip().lower().startswith(REASON_PREFIX) for line in doc.splitlines())


def measure(path: Path) -> tuple[int, list[tuple[str, int, int, bool]]]:
    """Lines of the module at ``path`` and, per function, (name, line, code lines, has a reason)."""
    text = path.read_text(encoding="utf-8")
    lines, tree = code_lines(text)
    functions = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = sum(1 for n in lines if node.lineno <= n <= node.end_lineno)
            functions.append((node.name, node.lineno, size, _has_reason(node)))
    return len(text.splitlines()), functions


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_counter_leaves_out_docstrings_comments_and_blank_lines():
    source = '"""Module doc."""\n\n# a comment\ndef f(x):\n    """Doc\n    on two lines."""\n\n    y = (x +\n         1)  # trailing\n    return y\n'
    lines, _ = code_lines(source)
    assert sorted(lines) == [4, 8, 9, 10]


def test_no_module_over_the_limit():
    over = []
    for path in _modules():
        if _rel(path) in EXEMPT_MODULES:
            continue
        size, _ = measure(path)
        if size > MODULE_LIMIT:
            over.append(f"{_rel(path)}: {size} lines")
    assert not over, f"modules over {MODULE_LIMIT} lines (split them by concept):\n" + "\n".join(over)


def test_no_long_function_without_a_reason():
    over = []
    for path in _modules():
        _, functions = measure(path)
        for name, lineno, size, reason in functions:
            if size > FUNCTION_LIMIT and not reason:
                over.append(f"{_rel(path)}:{lineno} {name}: {size} code lines")
    assert not over, (
        f"functions over {FUNCTION_LIMIT} code lines: split them into named helpers, or give the docstring "
        "a line starting 'Long because' saying why the function is one piece:\n" + "\n".join(over)
    )
