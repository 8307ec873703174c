"""The import rules of docs/architecture.md hold, and the modules the page names exist.

Every import counts, also one inside a function: a lazy import of a
forbidden package is still a dependency on it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORAGE = frozenset({"storage", "storage.sqlite", "storage.postgresql"})
PRODUCT = frozenset({"lockclient", "gateway"}) | STORAGE
# Each part of the code and the parts it may import (besides itself), as docs/architecture.md says.
ALLOWED: dict[str, frozenset[str]] = {
    "lockclient": frozenset(),
    "storage": frozenset({"lockclient"}),  # the shared core, knowing neither engine; lockclient: the wire
    "storage.sqlite": frozenset({"storage", "lockclient"}),  # limits its columns hold, the SQLite WAL switch
    "storage.postgresql": frozenset({"storage", "lockclient"}),
    "gateway": STORAGE | {"lockclient"},
    "fencegate.cli": frozenset({"lockclient"}),  # its URL mask, when a mistake is shown
    "fencegate.tables": frozenset(),
    "fencegate.lab.cluster": PRODUCT | {"fencegate.cli"},
    "fencegate.lab": PRODUCT | {"fencegate.lab.cluster", "fencegate.cli", "fencegate.tables"},
    "fencegate.bench": PRODUCT | {"fencegate.lab.cluster", "fencegate.cli", "fencegate.tables"},
    "fencegate.soak": PRODUCT
    | {"fencegate.lab.cluster", "fencegate.bench", "fencegate.cli", "fencegate.tables"},
    "fencegate.model": frozenset({"fencegate.lab", "fencegate.cli", "fencegate.tables"}),
    "fencegate.sql": frozenset({"lockclient", "fencegate.cli"}),
    "fencegate.lock": frozenset({"lockclient"}),
}


def part_of(module: str) -> str | None:
    """The part a module belongs to (the longest name in ALLOWED it starts with); None if not ours."""
    if module == "fencegate":
        return "fencegate.cli"  # the package's __init__: its version and docstring
    found = [part for part in ALLOWED if module == part or module.startswith(part + ".")]
    return max(found, key=len) if found else None


def imports(path: Path) -> set[str]:
    """Every absolute module name the file imports, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> dict[str, Path]:
    found = {}
    for package in ("lockclient", "storage", "gateway", "fencegate"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def test_every_module_belongs_to_a_part() -> None:
    assert [name for name in modules() if part_of(name) is None] == []


def test_no_part_imports_one_it_must_not() -> None:
    broken = []
    for name, path in modules().items():
        source = part_of(name)
        assert source is not None
        for imported in sorted(imports(path)):
            target = part_of(imported)
            if target is not None and target != source and target not in ALLOWED[source]:
                broken.append(f"{name} imports {imported}: {source} may not import {target}")
    assert broken == []


def test_the_rules_catch_a_product_module_that_imports_a_tool(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def later() -> None:\n    from fencegate.lab.cluster import LocalCluster\n")
    target = part_of(next(iter(imports(bad))))
    assert target == "fencegate.lab.cluster"
    assert target not in ALLOWED["gateway"]


def test_the_rules_keep_the_engines_apart_around_the_core() -> None:
    assert part_of("storage.sqlite.group_commit") == "storage.sqlite"
    assert part_of("storage.postgresql.reader") == "storage.postgresql"
    assert part_of("storage.fenced") == "storage"
    assert "storage.sqlite" not in ALLOWED["storage"] | ALLOWED["storage.postgresql"]
    assert "storage.postgresql" not in ALLOWED["storage"] | ALLOWED["storage.sqlite"]


def test_the_page_names_only_modules_that_exist() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"`((?:lockclient|gateway|storage|fencegate)/[\w/]+\.py)`", page))
    assert len(paths) >= 10
    assert sorted(p for p in paths if not (ROOT / p).is_file()) == []
    for part in ALLOWED:
        assert f"`{part}`" in page, f"docs/architecture.md does not list {part}"
