"""The wheel installs four names, each this project's, typed, with its license; nothing imports pytest."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fencegate", "lockclient", "gateway", "storage"}


def test_the_wheel_holds_the_four_packages_each_marked_typed(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the working tree
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("fencegate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == PACKAGES
    assert {f"{package}/py.typed" for package in PACKAGES} <= set(names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_no_installed_module_imports_pytest_or_the_tests() -> None:
    offenders = []
    for package in sorted(PACKAGES):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                offenders += [
                    f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("pytest", "tests")
                ]
    assert offenders == []
