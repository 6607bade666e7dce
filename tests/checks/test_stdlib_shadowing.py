"""No importable name at the repository root shadows a standard-library module.

`python -m venv`, `python -m pip` and the Dockerfile's `python -m compileall` run from the root put it first
on sys.path, so a package there named `operator` (or `types`, `ssl`, ...) is imported instead of the standard
library's, and setup fails on a stock Python.
"""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def importable_root_names(root: Path) -> set[str]:
    """What `import NAME` could find at the root: packages, modules and extension modules."""
    names = set()
    for entry in root.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            names.add(entry.name)
        elif entry.is_file() and entry.suffix in (".py", ".pyc", ".so", ".pyd"):
            names.add(entry.name.split(".")[0])
    return names


def test_no_root_package_or_module_is_named_after_a_standard_library_module():
    shadowing = sorted(importable_root_names(ROOT) & sys.stdlib_module_names)
    assert not shadowing, f"rename these root entries, they shadow the standard library: {shadowing}"


def test_the_check_sees_a_shadowing_package(tmp_path):
    (tmp_path / "operator").mkdir()
    (tmp_path / "operator" / "__init__.py").write_text("")
    (tmp_path / "types.py").write_text("")
    (tmp_path / "docs").mkdir()
    assert importable_root_names(tmp_path) & sys.stdlib_module_names == {"operator", "types"}


def test_every_mapped_package_folder_is_safe_to_import_from_the_root():
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    top_folders = {folder.split("/")[0] for folder in folders.values()}
    assert not top_folders & sys.stdlib_module_names


def test_the_standard_library_wins_from_the_repository_root_under_python_dash_m():
    # -m puts the working directory first on sys.path, as `python -m venv` does in `make setup`
    result = subprocess.run([sys.executable, "-m", "json.tool", "--help"], check=False, cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    probe = "import operator, collections; print(operator.__file__)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert Path(found.stdout.strip()).parent != ROOT
