"""The house rules on how modules depend on each other, checked by machine over the source.

* No import cycles between the modules of ``codeact`` and ``sandbox``: every import statement counts,
  at module level, inside a function or under ``if TYPE_CHECKING:`` (the packages' lazy ``__getattr__``
  exports are spelled there, and they are real imports on first use), relative imports resolved.
  Names imported from strings (``importlib.import_module``) are not seen. Importing a package is an edge to
  its ``__init__``; ``from package import name`` is an edge to the submodule ``package.name`` when
  there is one, else to the package's ``__init__``. So ``codeact/x/__init__.py`` re-exporting from
  ``codeact/x/_y.py`` while ``_y`` takes a sibling's name through ``codeact.x`` is a cycle
  (``_y`` then depends on how far ``__init__`` got); ``_y`` importing ``codeact.x._z`` is not.
* ``sandbox`` never imports ``codeact`` (the sandbox knows nothing of LLMs and agents).
* ``sandbox/runtime/*`` runs inside the kernel, where neither package is installed: it imports the
  standard library, its sibling files (as top-level modules there, as ``sandbox.runtime.*`` on the
  host) and the kernel's own packages listed in ``KERNEL_PACKAGES``, nothing else.

* No module uses another module's private names (a leading underscore, dunders aside): not
  ``from m import _name`` (unless ``_name`` is a private submodule of the importer's own package), not a
  private module ``_m`` of a package the importer is outside of (``codeact/output.py`` importing
  ``codeact.tools._render``), not ``alias._name`` on a name an import of ``codeact``/``sandbox`` bound in
  the file. A name another module needs gets a public spelling where it is defined (re-exported from the
  package's ``__init__`` when another package needs it). Attributes of other libraries' objects
  (``os._exit``, ipykernel's internals) are not ours to rename and are not checked.

A failure lists each offending import with its file and line, so it says what to move.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("codeact", "sandbox")
RUNTIME = "sandbox/runtime"  # its files are also top-level modules: the kernel has this directory on sys.path

#: Packages that are not the standard library but that ``sandbox/runtime`` may import: each is part of
#: the kernel the runtime starts or lives in, or is imported lazily with a clear error when absent.
KERNEL_PACKAGES = {
    "ipykernel": "the kernel itself (sandbox_runtime.launch starts an IPKernelApp)",
    "IPython": "the kernel's shell, a dependency of ipykernel",
    "zmq": "the kernel's transport (pyzmq, a dependency of ipykernel); the supervisor relays it",
    "cloudpickle": "snapshots only, imported when one is taken, with a clear error when missing",
    "traitlets": "the kernel's settings as a Config object (a dependency of ipykernel)",
    "jupyter_client": "its session and JSON helpers, loaded lazily at kernel start (a dependency of ipykernel)",
    "dateutil": "jupyter_client's date parsing, stood in for at kernel start (a dependency of jupyter_client)",
}


# --- the checker ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One imported module of one import statement.

    ``target`` is a module of the tree when ``internal``, else the absolute name as written (a
    standard-library or third-party module, or a name that does not resolve).
    """

    source: str
    target: str
    internal: bool
    path: str  # relative to the tree's root
    line: int
    statement: str

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.statement}"


def module_files(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    """Every module of the packages under ``root``: dotted name -> file (a package's name -> its __init__.py)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _statement(node: ast.Import | ast.ImportFrom) -> str:
    return " ".join(ast.unparse(node).split())


def _package_of(module: str, path: Path) -> str:
    """The package a relative import in ``module`` starts from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(root: Path, packages: Sequence[str], script_dirs: Sequence[str] = ()) -> list[Import]:
    """Every import in every module of the packages, resolved to modules of the tree where it names one.

    ``script_dirs`` (relative to ``root``) hold files that also run as top-level modules with their
    directory on ``sys.path``: there a plain ``import sibling`` names the sibling file.
    """
    modules = module_files(root, packages)
    found: list[Import] = []
    for module, path in modules.items():
        siblings: dict[str, str] = {}
        if any(path.parent == root / d for d in script_dirs):
            package = _package_of(module, path)
            siblings = {p.stem: f"{package}.{p.stem}" for p in path.parent.glob("*.py") if p.name != "__init__.py"}
        found += _module_imports(module, path, path.relative_to(root).as_posix(), modules, siblings)
    return found


def _module_imports(module: str, path: Path, rel: str, modules: dict[str, Path],
                    siblings: dict[str, str]) -> list[Import]:
    def resolve(name: str) -> str:
        head, _, rest = name.partition(".")
        return siblings[head] + (f".{rest}" if rest else "") if head in siblings else name

    found: list[Import] = []

    def add(target: str, node: ast.Import | ast.ImportFrom) -> None:
        name = resolve(target)
        if name != module:
            found.append(Import(module, name, name in modules, rel, node.lineno, _statement(node)))

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):  # every statement: module level, functions, classes, TYPE_CHECKING blocks
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = _package_of(module, path).split(".")
                if node.level - 1 >= len(base_parts):
                    raise AssertionError(f"{rel}:{node.lineno}: relative import beyond the top package")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                if node.module:
                    base = f"{base}.{node.module}"
            else:
                base = resolve(node.module or "")
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if alias.name != "*" and submodule in modules else base, node)
    return found


def import_cycles(imports: Iterable[Import]) -> list[list[Import]]:
    """The imports inside each strongly connected component of more than one module (Tarjan)."""
    edges: dict[str, set[str]] = {}
    for imp in imports:
        if imp.internal:
            edges.setdefault(imp.source, set()).add(imp.target)
            edges.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges) + 100))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    imports = list(imports)
    return [
        sorted((i for i in imports if i.internal and i.source in c and i.target in c),
               key=lambda i: (i.source, i.target, i.line))
        for c in sorted(components, key=min)
    ]


def describe_cycles(cycles: Sequence[Sequence[Import]]) -> str:
    parts = []
    for n, cycle in enumerate(cycles, 1):
        members = sorted({i.source for i in cycle} | {i.target for i in cycle})
        lines = [f"cycle {n}: {', '.join(members)}"]
        lines += [f"    {i.source} -> {i.target}    ({i.where()})" for i in cycle]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def forbidden_imports(imports: Iterable[Import], *, under: str, allowed: frozenset[str] | None = None,
                      banned: str | None = None) -> list[Import]:
    """Imports of modules whose files are under ``under`` that reach ``banned`` (a top-level package), or,
    with ``allowed``, anything outside the tree other than those top-level names."""
    bad = []
    for imp in imports:
        if not (imp.path == under or imp.path.startswith(under.rstrip("/") + "/")):
            continue
        top = imp.target.partition(".")[0]
        reaches_banned = banned is not None and top == banned
        if allowed is None:
            outside = False
        elif imp.internal:
            outside = not _within(imp.target, under)
        else:
            outside = top not in allowed
        if reaches_banned or outside:
            bad.append(imp)
    return bad


def _within(module: str, directory: str) -> bool:
    package = directory.replace("/", ".")
    return module == package or module.startswith(package + ".")


def describe(imports: Iterable[Import]) -> str:
    return "\n".join(f"    {i.where()}" for i in imports)


# --- private names ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateUse:
    """One use of another module's private name: ``name`` is the dotted name reached (``codeact.tools._render``,
    ``codeact.agent._RunState``, ``sandbox.runtime.sandbox_codec_values._TAG``)."""

    path: str  # relative to the tree's root
    line: int
    name: str
    text: str  # the import statement or the attribute expression

    @property
    def key(self) -> str:
        """How the allow-list names it: file and name, no line (lines move)."""
        return f"{self.path}: {self.name}"

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.text}  ({self.name})"


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _inside(package: str, owner: str) -> bool:
    return package == owner or package.startswith(owner + ".")


def private_uses(root: Path, packages: Sequence[str], script_dirs: Sequence[str] = ()) -> list[PrivateUse]:
    """Every use, in the packages' modules, of a private name of another module (see the module's docstring)."""
    modules = module_files(root, packages)
    found: list[PrivateUse] = []
    for module, path in modules.items():
        siblings: dict[str, str] = {}
        if any(path.parent == root / d for d in script_dirs):
            siblings = {p.stem: f"{_package_of(module, path)}.{p.stem}" for p in path.parent.glob("*.py")
                        if p.name != "__init__.py"}
        found += _private_uses_of(module, path, path.relative_to(root).as_posix(), modules, packages, siblings)
    return sorted(found, key=lambda u: (u.path, u.line, u.name))


def _private_uses_of(module: str, path: Path, rel: str, modules: dict[str, Path], packages: Sequence[str],
                     siblings: dict[str, str]) -> list[PrivateUse]:
    package = _package_of(module, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[PrivateUse] = []
    bound: dict[str, str] = {}  # name an import of one of our modules binds in this file -> what it names

    def ours(name: str) -> bool:
        return name.partition(".")[0] in packages

    def check_module(name: str, node: ast.AST, text: str) -> None:
        """A private module of a package the importer is outside of."""
        parts = name.split(".")
        for i, part in enumerate(parts):
            if _private(part):
                if not _inside(package, ".".join(parts[:i])):
                    found.append(PrivateUse(rel, getattr(node, "lineno", 0), ".".join(parts[: i + 1]), text))
                return

    for node in ast.walk(tree):  # every statement: module level, functions, classes, TYPE_CHECKING blocks
        if isinstance(node, ast.Import):
            for alias in node.names:
                head, _, rest = alias.name.partition(".")
                name = siblings[head] + (f".{rest}" if rest else "") if head in siblings else alias.name
                if ours(name):
                    check_module(name, node, _statement(node))
                    if alias.asname:
                        bound[alias.asname] = name
                    else:
                        bound[head] = siblings.get(head, head)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                if node.module:
                    base = f"{base}.{node.module}"
            else:
                head, _, rest = (node.module or "").partition(".")
                base = siblings[head] + (f".{rest}" if rest else "") if head in siblings else node.module or ""
            if not ours(base):
                continue
            text = _statement(node)
            check_module(base, node, text)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    check_module(target, node, text)  # a submodule: private only to its own package
                elif _private(alias.name):
                    found.append(PrivateUse(rel, node.lineno, target, text))
                if alias.name != "*":
                    bound[alias.asname or alias.name] = target
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = [node.attr]
            root = node.value
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                name = ".".join([bound[root.id], *reversed(chain)])
                found.append(PrivateUse(rel, node.lineno, name, ast.unparse(node)))
    return found


#: Uses of private names that remain, as "file: dotted name" (see PrivateUse.key). Each entry is a debt: give the
#: name a public home and delete the entry; an entry that no longer occurs fails the test until it is deleted.
ALLOWED_PRIVATE_USES: frozenset[str] = frozenset()


# --- the rules, over the real tree ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree_imports() -> list[Import]:
    return imports_of(REPO, PACKAGES, script_dirs=(RUNTIME,))


def test_no_import_cycles(tree_imports: list[Import]) -> None:
    cycles = import_cycles(tree_imports)
    if cycles:
        pytest.fail("Modules import each other in a circle (each line: an import inside the circle; moving what "
                    "it needs to a module below both breaks it):\n" + describe_cycles(cycles), pytrace=False)


def test_sandbox_never_imports_codeact(tree_imports: list[Import]) -> None:
    bad = forbidden_imports(tree_imports, under="sandbox", banned="codeact")
    if bad:
        pytest.fail("sandbox must not import codeact (codeact imports sandbox, never the reverse):\n" + describe(bad),
                    pytrace=False)


def test_the_runtime_imports_only_the_standard_library_and_itself(tree_imports: list[Import]) -> None:
    allowed = frozenset(sys.stdlib_module_names) | frozenset(KERNEL_PACKAGES)
    bad = forbidden_imports(tree_imports, under=RUNTIME, allowed=allowed)
    if bad:
        pytest.fail(f"{RUNTIME}/* runs inside the kernel without the host packages: it may import the standard "
                    f"library, its sibling files and {sorted(KERNEL_PACKAGES)} only:\n" + describe(bad), pytrace=False)


def test_no_module_uses_another_modules_private_names() -> None:
    uses = private_uses(REPO, PACKAGES, script_dirs=(RUNTIME,))
    bad = [u for u in uses if u.key not in ALLOWED_PRIVATE_USES]
    stale = sorted(ALLOWED_PRIVATE_USES - {u.key for u in uses})
    if bad:
        pytest.fail("A module uses another module's private names (give each a public name where it is defined, "
                    "re-exported from its package's __init__ when another package needs it):\n"
                    + "\n".join(f"    {u.where()}" for u in bad), pytrace=False)
    if stale:
        pytest.fail("ALLOWED_PRIVATE_USES lists uses that are gone; delete these entries:\n"
                    + "\n".join(f"    {k}" for k in stale), pytrace=False)


def test_the_checker_sees_every_module_and_resolves_relative_imports(tree_imports: list[Import]) -> None:
    modules = module_files(REPO, PACKAGES)
    assert {"codeact", "sandbox", "sandbox.runtime.sandbox_wire"} <= set(modules)
    assert len(modules) > 50
    # Both spellings of the runtime's sibling import resolve to the same module.
    wire = {i.statement for i in tree_imports
            if i.source == "sandbox.runtime.sandbox_init" and i.target == "sandbox.runtime.sandbox_wire"}
    assert {"from . import sandbox_wire as wire", "import sandbox_wire as wire"} <= wire, wire


# --- the checker can fail ------------------------------------------------------------------------------------------


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_cycle_through_a_function_level_import_is_found_with_its_lines(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "import os\n\ndef later():\n    from pkg.c import thing\n",
        "pkg/c.py": "from .a import x\n",
        "pkg/d.py": "import pkg.a\n",  # depends on the circle, not part of it
    })
    cycles = import_cycles(imports_of(root, ["pkg"]))
    assert [[(i.source, i.target, i.path, i.line) for i in cycle] for cycle in cycles] == [[
        ("pkg.a", "pkg.b", "pkg/a.py", 1),
        ("pkg.b", "pkg.c", "pkg/b.py", 4),
        ("pkg.c", "pkg.a", "pkg/c.py", 1),
    ]]
    text = describe_cycles(cycles)
    assert "cycle 1: pkg.a, pkg.b, pkg.c" in text
    assert "pkg.b -> pkg.c    (pkg/b.py:4: from pkg.c import thing)" in text


def test_a_reexporting_package_is_a_cycle_only_when_its_module_imports_through_it(tmp_path: Path) -> None:
    through_the_package = write_tree(tmp_path / "one", {
        "pkg/__init__.py": "",
        "pkg/x/__init__.py": "from ._y import Y\nfrom ._z import Z\n",
        "pkg/x/_y.py": "from pkg.x import Z\n",
        "pkg/x/_z.py": "Z = 1\n",
    })
    cycles = import_cycles(imports_of(through_the_package, ["pkg"]))
    assert [sorted({i.source for i in c}) for c in cycles] == [["pkg.x", "pkg.x._y"]]

    to_the_sibling = write_tree(tmp_path / "two", {
        "pkg/__init__.py": "",
        "pkg/x/__init__.py": "from ._y import Y\nfrom ._z import Z\n",
        "pkg/x/_y.py": "from pkg.x._z import Z\nfrom . import _z\nfrom .. import x as _unused\n",
        "pkg/x/_z.py": "Z = 1\n",
    })
    imports = imports_of(to_the_sibling, ["pkg"])
    assert {(i.source, i.target) for i in imports if i.source == "pkg.x._y"} == {
        ("pkg.x._y", "pkg.x._z"), ("pkg.x._y", "pkg.x")}
    # `from .. import x` names the package x itself: that is the cycle again.
    assert [sorted({i.source for i in c}) for c in import_cycles(imports)] == [["pkg.x", "pkg.x._y"]]
    fixed = [i for i in imports if i.statement != "from .. import x as _unused"]
    assert import_cycles(fixed) == []


def test_forbidden_imports_are_found_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "app/__init__.py": "import lib\n",
        "lib/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app import thing\n",
        "lib/rt/__init__.py": "",
        "lib/rt/one.py": "import json\nimport two\n\ndef f():\n    import numpy\n    from lib import x\n",
        "lib/rt/two.py": "from . import one\n",
    })
    imports = imports_of(root, ["app", "lib"], script_dirs=("lib/rt",))
    assert [i.where() for i in forbidden_imports(imports, under="lib", banned="app")] == [
        "lib/__init__.py:3: from app import thing"]
    bad = forbidden_imports(imports, under="lib/rt", allowed=frozenset(sys.stdlib_module_names))
    assert [i.where() for i in bad] == ["lib/rt/one.py:5: import numpy", "lib/rt/one.py:6: from lib import x"]
    # `import two` inside lib/rt is the sibling file, the same module as `from . import two` on the host.
    assert ("lib.rt.one", "lib.rt.two") in {(i.source, i.target) for i in imports if i.internal}


def test_private_names_are_found_in_imports_and_on_imported_modules(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "from ._impl import thing\nfrom . import _impl\n",  # its own private module: fine
        "pkg/a/_impl.py": "thing = 1\n_hidden = 2\n",
        "pkg/a/_other.py": "from ._impl import _hidden\n",
        "pkg/b.py": textwrap.dedent("""\
            from .a import _impl
            from pkg.a._impl import thing
            import pkg.a._impl as impl
            from . import a
            x = a._impl
            def f(self):
                import os
                return impl._hidden, os._exit, a.__name__, self._x, thing._cache
            """),
        "pkg/rt/__init__.py": "",
        "pkg/rt/one.py": "import two as _two\n_two._x\n",
        "pkg/rt/two.py": "_x = 1\n",
    })
    found = [(u.path, u.line, u.name) for u in private_uses(root, ["pkg"], script_dirs=("pkg/rt",))]
    assert found == [
        ("pkg/a/_other.py", 1, "pkg.a._impl._hidden"),  # a private name, even from a sibling
        ("pkg/b.py", 1, "pkg.a._impl"),  # a private module of a package b is not inside
        ("pkg/b.py", 2, "pkg.a._impl"),
        ("pkg/b.py", 3, "pkg.a._impl"),
        ("pkg/b.py", 5, "pkg.a._impl"),  # through the package
        ("pkg/b.py", 8, "pkg.a._impl._hidden"),  # on a module an import bound (os._exit is not ours)
        ("pkg/b.py", 8, "pkg.a._impl.thing._cache"),  # on a name imported from our module
        ("pkg/rt/one.py", 2, "pkg.rt.two._x"),  # a runtime sibling imported as a top-level module
    ]
