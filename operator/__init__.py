"""The mlgate reconciler, imported as `mlgate_reconciler`.

This folder is called `operator/` but `operator` is a standard-library module, so the
package name is mapped in pyproject.toml ([tool.setuptools.package-dir]). Never import it
as `operator`.
"""
