"""Packages that export names lazily (rmtl.lazy) say the same names three times: the ``_LAZY`` table
(what ``__getattr__`` imports at run time), the ``if TYPE_CHECKING:`` imports (what type checkers
and IDEs see) and ``__all__``. A name added to one only fails here, as does one that does not resolve."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("rmtl", "pipeline", "flows", "storage")


def _lazy_packages() -> list[Path]:
    return sorted(p for root in ROOTS for p in (REPO / root).rglob("__init__.py")
                  if "lazy_attributes(" in p.read_text())


def _declared(init: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(_LAZY's name -> module, the TYPE_CHECKING imports' name -> module, __all__) of one __init__.py."""
    lazy: dict[str, str] = {}
    typing_mirror: dict[str, str] = {}
    exported: list[str] = []
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "_LAZY":
                lazy = ast.literal_eval(node.value)
            elif node.targets[0].id == "__all__":
                exported = ast.literal_eval(node.value)
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), f"{init}: only 'from M import names' in the TYPE_CHECKING block"
                for alias in imp.names:
                    assert alias.asname is None, f"{init}: {alias.name} is imported under another name"
                    typing_mirror[alias.name] = imp.module
    return lazy, typing_mirror, exported


def _dotted(init: Path) -> str:
    return ".".join(init.parent.relative_to(REPO).parts)


def test_the_lazy_packages_are_found():
    assert {_dotted(p) for p in _lazy_packages()} >= {"rmtl.train", "rmtl.reward", "rmtl.vlm", "pipeline.train_vlm"}


@pytest.mark.parametrize("init", _lazy_packages(), ids=_dotted)
def test_lazy_table_typing_imports_and_all_name_the_same(init):
    lazy, typing_mirror, exported = _declared(init)
    assert lazy, f"{init}: no _LAZY table (a dict literal)"
    assert len(exported) == len(set(exported)), f"{init}: __all__ repeats a name"
    names = {"_LAZY": set(lazy), "TYPE_CHECKING imports": set(typing_mirror), "__all__": set(exported)}
    for what, these in names.items():
        for other, those in names.items():
            assert not these - those, f"{init}: {sorted(these - those)} in {what} but not in {other}"
    moved = {n: (lazy[n], typing_mirror[n]) for n in lazy if lazy[n] != typing_mirror[n]}
    assert not moved, f"{init}: _LAZY and the TYPE_CHECKING imports name other modules (lazy, typing): {moved}"


@pytest.mark.parametrize("init", _lazy_packages(), ids=_dotted)
def test_every_lazy_name_resolves(init):
    package = importlib.import_module(_dotted(init))
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    lazy, _, _ = _declared(init)
    for name, module in lazy.items():
        value = getattr(package, name)
        # A name that is also a submodule's is that module once the submodule is imported (the
        # import system sets it on the package), so only that it resolves is checked.
        if name not in submodules:
            assert value is getattr(importlib.import_module(module), name), f"{package.__name__}.{name}"
