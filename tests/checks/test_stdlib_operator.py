"""The reconciler's folder is `operator/`, imported as `mlgate_reconciler`; the stdlib wins."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import operator, mlgate_reconciler; print(operator.__file__); print(operator.itemgetter(1)([5, 6]))"


def test_stdlib_operator_still_works_from_the_repository_root():
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    module_file, item = result.stdout.split()
    assert Path(module_file).parent != ROOT / "operator"
    assert Path(module_file).name == "operator.py"
    assert item == "6"


def test_reconciler_package_is_the_operator_folder():
    import mlgate_reconciler

    assert Path(mlgate_reconciler.__file__).parent == ROOT / "operator"


def test_the_mapping_is_written_in_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'mlgate_reconciler = "operator"' in text
