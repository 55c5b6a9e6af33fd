"""Loading tools named by a CLI spec: ``package.module:ALL``, ``path/to/file.py:name1,name2``."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError, ToolDefinitionError, UnknownToolError
from ._tool import Tool, ensure_tools


def load_tools(spec: str) -> list[Tool[Any, Any]]:
    """Load tools named by a CLI spec.

    Forms: ``"package.module:ALL"``, ``"package.module:name1,name2"``,
    ``"path/to/file.py:ALL"``, ``"path/to/file.py:name"``. ``ALL`` takes every
    :class:`Tool` object in the module plus every public function defined in
    that module that has a docstring. A name may refer to a Tool or to a
    plain function (converted with :func:`tool`). Without ``:names``, ALL is
    meant.

    Raises:
        ConfigError: the spec is malformed, or the module or file does not exist
            or fails to import.
        UnknownToolError: a requested name is not in the module (the message
            lists what is).
        ToolDefinitionError: an object cannot become a tool, or two share a name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("empty tool spec; use 'package.module:ALL', 'module:name1,name2' or 'path/to/file.py:name'")
    target, sep, names_text = spec.strip().rpartition(":")
    if not sep or not target or (len(target) == 1 and target.isalpha()):
        # No colon, or only a Windows drive letter before it: the whole spec is the target.
        target, names_text = spec.strip(), "ALL"
    names = [n.strip() for n in names_text.split(",")]
    if not names or any(not n for n in names):
        raise ConfigError(f"tool spec {spec!r}: list tool names after ':' separated by commas, or use ALL")

    module = _import_target(target, spec)
    if names == ["ALL"]:
        return ensure_tools(_all_tools(module, target))

    namespace = vars(module)
    # A name is a module attribute or the name of a Tool (@tool(name=...) may differ).
    by_tool_name = {obj.name: obj for obj in namespace.values() if isinstance(obj, Tool)}
    tools: list[Tool[Any, Any]] = []
    for name in names:
        if name in namespace:
            obj = namespace[name]
        elif name in by_tool_name:
            obj = by_tool_name[name]
        else:
            candidates = _candidate_names(module)
            hint = difflib.get_close_matches(name, candidates + list(namespace), n=1)
            raise UnknownToolError(
                f"{target} has no tool or function named {name!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; available: {', '.join(candidates) or 'none'}"
            )
        if isinstance(obj, Tool):
            tools.append(obj)
        elif callable(obj) and not inspect.isclass(obj):
            tools.append(Tool(obj))
        else:
            raise ToolDefinitionError(f"{target}:{name} is a {type(obj).__name__}, not a function or tool")
    return ensure_tools(tools)


def _looks_like_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _import_target(target: str, spec: str) -> types.ModuleType:
    if _looks_like_file(target):
        return _import_file(Path(target), spec)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(
            f"tool spec {spec!r}: {target!r} is neither a module path (package.module) nor a .py file"
        )
    try:
        return _import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise ConfigError(
                f"tool spec {spec!r}: no module named {exc.name!r}; check the spelling, install the package, "
                "or run from the directory that contains it (or give a path: path/to/file.py:ALL)"
            ) from None
        raise ConfigError(f"importing {target!r} for the tool spec failed: {exc}") from exc
    except Exception as exc:
        raise ConfigError(f"importing {target!r} for the tool spec failed: {type(exc).__name__}: {exc}") from exc


def _import_module(target: str) -> types.ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError:
        # Like `python -m`, look in the current directory too; the console
        # script does not put it on sys.path. Only for this import.
        cwd = os.getcwd()
        if cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)
        try:
            return importlib.import_module(target)
        finally:
            sys.path.remove(cwd)


def _import_file(path: Path, spec: str) -> types.ModuleType:
    if not path.is_file():
        parent = path.parent if str(path.parent) else Path(".")
        near = sorted(p.name for p in parent.glob("*.py")) if parent.is_dir() else []
        raise ConfigError(
            f"tool spec {spec!r}: file {str(path)!r} does not exist"
            + (f"; Python files in {str(parent)!r}: {', '.join(near)}" if near else "")
        )
    resolved = path.resolve()
    # A unique module name per file, registered in sys.modules: dataclasses and
    # pydantic look a class's module up there to resolve its annotations.
    module_name = f"codeact_tools_{resolved.stem}_{abs(hash(str(resolved))):x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"tool spec {spec!r}: cannot import {str(path)!r} as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    # The file may import its sibling modules, as it could when run as a script.
    directory = str(resolved.parent)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise ConfigError(f"importing {str(path)!r} for the tool spec failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)
    return module


def _public_functions(module: types.ModuleType) -> list[tuple[str, Callable[..., Any]]]:
    """Public functions defined in ``module`` itself (not imported into it) that have a docstring."""
    return [
        (name, obj)
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and not name.startswith("_")
        and obj.__module__ == module.__name__
        and inspect.getdoc(obj)
    ]


def _candidate_names(module: types.ModuleType) -> list[str]:
    tools: list[Tool[Any, Any]] = []
    for obj in vars(module).values():
        if isinstance(obj, Tool) and not any(obj is t for t in tools):
            tools.append(obj)
    wrapped = {id(t.func) for t in tools}
    return [t.name for t in tools] + [name for name, f in _public_functions(module) if id(f) not in wrapped]


def _all_tools(module: types.ModuleType, target: str) -> list[Tool[Any, Any]]:
    found: list[Tool[Any, Any]] = []
    for obj in vars(module).values():
        if isinstance(obj, Tool) and not any(obj is t for t in found):
            found.append(obj)
    wrapped = {id(t.func) for t in found}
    for name, func in _public_functions(module):
        if id(func) in wrapped:  # `x = tool(f)` keeps f around too; offer it once
            continue
        try:
            found.append(Tool(func))
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(
                f"{exc}. ({target}:ALL takes every public function with a docstring; make helper "
                f"functions private (_{name}) or name the tools: {target}:tool1,tool2)"
            ) from exc
    if not found:
        raise ToolDefinitionError(
            f"{target} defines no tools: decorate functions with @tool, or give public functions a docstring"
        )
    return found
