"""The screen: what an answer cell may not do, decided from its syntax tree before it runs.

An answer cell is code a learner wrote; the autograder runs it in the same kernel as the tests
that grade it. Whatever the cell can change there, it can use to pass those tests without the
skill: hooks into the kernel (``get_ipython``, input transformers, ``sys.settrace``, edits to
``sys.modules``), rebinding what the tests call (``grading``, ``isinstance``, a lab module),
changing an imported module's attributes, strings run as code, reading files (the instructor's
notebooks beside the submission), objects whose comparison lies (dunder methods), and the
package functions that compute an exercise's answer. The screen refuses each of those with the
line and a reason; the cell is then not run and its tests fail with that reason.

The rules are written as allow-lists where a list can be short (imports) and as named
constructs elsewhere. They run on the text IPython would execute (magics and ``!`` commands are
turned into the ``get_ipython()`` calls they are, and refused as such). The screen is the first
of two layers: the kernel that runs the notebook also cannot read the course folder
(:mod:`gdrlab.autograde.landlock`), so a read the screen misses finds nothing to read.
"""
from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["ALLOWED_IMPORTS", "Finding", "bound_names", "import_map", "read_names", "screen"]

# Modules an answer may import (its first component); gdrlab's public modules are checked apart.
ALLOWED_IMPORTS = frozenset({
    "math", "cmath", "statistics", "fractions", "decimal", "itertools", "functools", "collections",
    "dataclasses", "typing", "numbers", "bisect", "heapq", "re", "enum", "numpy", "pandas", "gdrlab",
})
# gdrlab modules an answer may not import: the checks the tests call, and the grader itself.
_PACKAGE_REFUSED = ("gdrlab.grading", "gdrlab.autograde")

# Names whose every use is refused: code from strings, namespaces, dynamic attribute access,
# the kernel, files, and the interpreter's own hooks.
_NAMES = {
    "get_ipython": "hooks into the kernel", "exec": "runs a string as code", "eval": "runs a string as code",
    "compile": "compiles a string into code", "globals": "reaches the notebook's namespace",
    "locals": "reaches the notebook's namespace", "vars": "reaches an object's namespace",
    "getattr": "reaches attributes by computed name", "setattr": "changes attributes by computed name",
    "delattr": "removes attributes by computed name", "open": "reads or writes files",
    "breakpoint": "enters the debugger", "input": "waits for input the grader cannot give",
    "exit": "stops the kernel", "quit": "stops the kernel", "help": "starts the interactive help",
    "memoryview": "reaches raw memory",
}
# Modules an answer may not reach, whether by name or as an attribute of another module
# (``gdrlab.hw.sysfs.subprocess``).
_MODULES = frozenset({
    "sys", "os", "posix", "subprocess", "builtins", "importlib", "ctypes", "shutil", "pathlib", "io",
    "socket", "signal", "threading", "multiprocessing", "inspect", "gc", "types", "codeop", "runpy",
    "pickle", "marshal", "IPython", "ipykernel", "traitlets", "tempfile", "glob", "nbformat", "nbgrader",
    "zmq", "jupyter_client", "resource", "mmap", "operator", "sqlite3", "atexit", "faulthandler",
    "ctypeslib", "weakref", "asyncio", "concurrent", "urllib", "http", "shlex", "pty", "fcntl",
})
# Attributes whose use is refused wherever they appear.
_ATTRIBUTES = {
    "settrace": "installs a tracer", "setprofile": "installs a profiler", "modules": "edits loaded modules",
    "meta_path": "edits the import system", "path_hooks": "edits the import system",
    "input_transformers_cleanup": "rewrites later cells", "input_transformers_post": "rewrites later cells",
    "ast_transformers": "rewrites later cells", "events": "hooks kernel events",
    "register_magic_function": "adds magics", "run_cell": "runs code in the kernel",
    "run_line_magic": "runs code in the kernel", "run_cell_magic": "runs code in the kernel",
    "user_ns": "reaches the notebook's namespace", "user_global_ns": "reaches the notebook's namespace",
    "set_custom_exc": "hides errors", "excepthook": "hides errors", "displayhook": "rewrites outputs",
    "system": "runs a shell command", "popen": "runs a shell command", "load_library": "loads native code",
    "attrgetter": "reaches attributes by computed name", "methodcaller": "calls methods by computed name",
    "f_globals": "reaches a frame", "f_locals": "reaches a frame", "f_back": "reaches a frame",
    "f_builtins": "reaches a frame", "tb_frame": "reaches a frame", "gi_frame": "reaches a frame",
    "cr_frame": "reaches a frame", "ag_frame": "reaches a frame", "f_code": "reaches code objects",
    "gi_code": "reaches code objects",
    # files: what the course folder holds is not the answer's to read
    "load": "reads a file", "loadtxt": "reads a file", "genfromtxt": "reads a file", "fromfile": "reads a file",
    "memmap": "maps a file", "read_text": "reads a file", "read_bytes": "reads a file",
    "get_handle": "opens a file", "tofile": "writes a file", "save": "writes a file", "savez": "writes a file",
    # pandas' own string evaluators
    "query": "evaluates a string", "to_pickle": "writes a file", "read_pickle": "reads a file",
}
_READERS = re.compile(r"^(read_|to_(csv|json|parquet|excel|html|sql|hdf|feather|stata|xml|latex|markdown|orc)$)")
_DUNDER = re.compile(r"^__\w+__$")
_DUNDER_IN_TEXT = re.compile(r"__\w+__")
_FORMAT_FIELD_ATTR = re.compile(r"\{[^{}]*[.\[]")
# Dunder methods a learner's own class may define; any other changes how the grader's checks see it.
_ALLOWED_DUNDER_DEFS = frozenset({"__init__", "__repr__", "__str__", "__post_init__"})
_BUILTIN_NAMES = frozenset(name for name in dir(builtins) if not name.startswith("_"))


@dataclass(frozen=True)
class Finding:
    """One refused construct: the line in the cell (1-based) and why it is refused."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def python_source(cell_source: str) -> str:
    """The Python the kernel would run for this cell text (IPython's own transformation, so that
    ``%magic`` and ``!cmd`` are seen as the ``get_ipython()`` calls they become)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # without IPython there is no kernel to run magics either
        return cell_source
    return str(TransformerManager().transform_cell(cell_source))


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(python_source(source))
    except SyntaxError:
        return None


def _top_level(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes whose bindings land in the notebook's namespace: not inside a def, class, lambda
    or comprehension."""
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                                 ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            stack.extend(ast.iter_child_nodes(node))


def bound_names(source: str) -> set[str]:
    """Names a cell binds in the notebook's namespace (assignments, loops, imports, defs)."""
    tree = _parse(source)
    names: set[str] = set()
    for node in _top_level(tree) if tree else ():
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return names


def read_names(source: str) -> set[str]:
    """The names a cell reads from the notebook (what a test depends on): every name it loads
    that it does not bind itself (loop variables, its own temporaries, arguments)."""
    tree = _parse(source)
    if tree is None:
        return set()
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    own |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
            for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, *(x for x in (n.vararg, n.kwarg) if x))}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    own |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}
    return loaded - own


def import_map(source: str) -> dict[str, str]:
    """{bound name: the module or object it is imported as} for a cell's imports."""
    tree = _parse(source)
    out: dict[str, str] = {}
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _root(node: ast.AST) -> str | None:
    """The name an attribute or subscript chain starts from (``a`` in ``a.b[1].c``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _imports(tree: ast.AST) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for a in node.names if a.name != "*"}


def screen(source: str, *, protected: Iterable[str] = (), forbidden_calls: dict[str, str] | None = None,
           lab_imports: dict[str, str] | None = None) -> list[Finding]:
    """What refuses this answer cell, in line order (empty: it may run).

    ``protected``: names the tests read (the lab's imports, its data, the checks); the answer may
    read them but not rebind them or assign into them. Builtins are always protected.
    ``forbidden_calls``: {name: why} of package functions that would compute this exercise's
    answer (refused as a name or an attribute anywhere in the cell). ``lab_imports``: the lab's
    own imports ({name: module}); importing the same module under the same name again is allowed."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError as exc:
        return [Finding(exc.lineno or 1, f"the cell does not parse ({exc.msg}), so it cannot be checked")]
    check = _Screen(set(protected), forbidden_calls or {}, dict(lab_imports or {}), _imports(tree))
    for node in ast.walk(tree):
        check.expression(node)
        check.statement(node)
    return sorted(set(check.found), key=lambda f: (f.line, f.reason))


class _Screen:
    """The rules, one node at a time; findings collect in ``found``."""

    def __init__(self, protected: set[str], forbidden: dict[str, str], same_imports: dict[str, str],
                 cell_imports: set[str]) -> None:
        self.guarded = protected | _BUILTIN_NAMES
        self.modules = protected | cell_imports  # what assignments may not reach into
        self.forbidden = forbidden
        self.same_imports = same_imports
        self.found: list[Finding] = []

    def refuse(self, node: ast.AST, reason: str) -> None:
        self.found.append(Finding(getattr(node, "lineno", 1), reason))

    def binding(self, node: ast.AST, name: str, imported: str | None = None) -> None:
        if imported is not None and self.same_imports.get(name) == imported:
            return  # the same import the lab makes: nothing changes
        if name in self.guarded:
            self.refuse(node, f"rebinds `{name}`, which the lab's own cells or Python define and the tests use")

    def expression(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            if node.id in _NAMES:
                self.refuse(node, f"`{node.id}` {_NAMES[node.id]}")
            elif _DUNDER.match(node.id):
                self.refuse(node, f"`{node.id}` reaches the interpreter's internals")
            elif node.id in _MODULES:
                self.refuse(node, f"`{node.id}` is a module answers may not use")
            elif node.id in self.forbidden:
                self.refuse(node, f"`{node.id}` {self.forbidden[node.id]}")
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.binding(node, node.id)
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            if _DUNDER.match(attr):
                self.refuse(node, f"`.{attr}` reaches the interpreter's internals")
            elif attr in _ATTRIBUTES:
                self.refuse(node, f"`.{attr}` {_ATTRIBUTES[attr]}")
            elif _READERS.match(attr):
                self.refuse(node, f"`.{attr}` reads or writes a file")
            elif attr in _MODULES:
                self.refuse(node, f"`.{attr}` is a module answers may not use")
            elif attr in self.forbidden:
                self.refuse(node, f"`.{attr}` {self.forbidden[attr]}")
            elif attr.startswith("_") and _root(node) in self.modules:
                self.refuse(node, f"`.{attr}` is private to the module it belongs to")
            if isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node) in self.modules:
                self.refuse(node, f"changes `{_root(node)}`, which the lab's own cells set up and the tests use")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if _root(node) in self.modules:
                self.refuse(node, f"changes `{_root(node)}`, which the lab's own cells set up and the tests use")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _DUNDER_IN_TEXT.search(node.value):
                self.refuse(node, "a string naming an interpreter internal (`__...__`)")
            elif node.value in self.forbidden:
                self.refuse(node, f"the string {node.value!r} names a function this exercise forbids")
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in ("format", "format_map")
                    and isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)
                    and _FORMAT_FIELD_ATTR.search(func.value.value)):
                self.refuse(node, "a format string that reaches into its arguments' attributes")
            if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
                self.refuse(node, "`type()` with three arguments builds a class from a dictionary")
    def statement(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.binding(node, node.name)
            if _DUNDER.match(node.name) and node.name not in _ALLOWED_DUNDER_DEFS:
                self.refuse(node, f"defines `{node.name}`, which changes how the checks see your answer")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                self.binding(node, name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                _check_import(node, alias.name, self.refuse)
                bound = alias.asname or alias.name.split(".")[0]
                self.binding(node, bound, alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                self.refuse(node, "relative imports are not allowed in answers")
                return
            _check_import(node, node.module or "", self.refuse)
            for alias in node.names:
                if alias.name == "*":
                    self.refuse(node, "`import *` can rebind the names the tests use")
                    continue
                _check_import(node, f"{node.module}.{alias.name}", self.refuse, leaf=True)
                if alias.name.startswith("_"):
                    self.refuse(node, f"`{alias.name}` is private to `{node.module}`")
                elif alias.name in self.forbidden:
                    self.refuse(node, f"`{alias.name}` {self.forbidden[alias.name]}")
                self.binding(node, alias.asname or alias.name, f"{node.module}.{alias.name}")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.binding(node, node.name)


def _check_import(node: ast.AST, module: str, refuse: Callable[[ast.AST, str], None], *, leaf: bool = False) -> None:
    parts = module.split(".")
    if parts[0] not in ALLOWED_IMPORTS:
        if not leaf:
            refuse(node, f"`import {module}`: answers may import only {', '.join(sorted(ALLOWED_IMPORTS))}")
        return
    if parts[0] == "gdrlab":
        if any(p.startswith("_") for p in parts[1:]):
            refuse(node, f"`{module}` is private to gdrlab")
        elif any(module == m or module.startswith(m + ".") for m in _PACKAGE_REFUSED):
            refuse(node, f"`{module}` is the grader's; answers do not import it")
    elif any(p.startswith("_") for p in parts[1:]):
        refuse(node, f"`{module}` is private to {parts[0]}")


def forbidden_calls_of(cell: Any) -> dict[str, str]:
    """{name: why} an answer cell's metadata forbids (``metadata.gdrlab.forbid``)."""
    forbid = cell.get("metadata", {}).get("gdrlab", {}).get("forbid", {})
    if not isinstance(forbid, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in forbid.items()):
        raise ValueError(f"cell {cell.get('id')}: metadata gdrlab.forbid must map names to reasons")
    return dict(forbid)
