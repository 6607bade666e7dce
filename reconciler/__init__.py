"""The mlgate reconciler, imported as `mlgate_reconciler` (folder `reconciler/`, mapped in pyproject.toml).

The folder is not called `operator/`: `operator` is a standard-library module, and a package of that name at
the repository root is what `python -m venv` and `python -m pip` would import from there instead.
"""
