# One way in: `make run` (the main job) and `make test` (the whole suite, checks included).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup lock run test e2e control-plane checks stock-pythons pythons bench bench-webhook bench-e2e bench-reconciler demo demo-cluster clean

setup: $(STAMP)

# The whole tree as requirements-dev.lock pins it (hashes checked), then mlgate itself over it.
$(STAMP): pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# The lock files from pyproject.toml's ranges, after a dependency changes: requirements-dev.lock (CLI, server,
# reconciler and dev tools) and requirements.lock (what the image runs), the second within the first.
lock: setup
	$(BIN)/pip install --quiet 'uv>=0.13,<0.14'
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 --generate-hashes \
		--no-annotate --no-header --upgrade -o requirements-dev.lock
	$(BIN)/uv pip compile pyproject.toml --extra server --extra reconciler --universal --python-version 3.11 \
		--generate-hashes --no-annotate --no-header -c requirements-dev.lock -o requirements.lock

# The main job on the embedded default: the webhook on https://127.0.0.1:8443 with dev
# certificates it makes under .state/ and the shipped policies/ (Ctrl-C stops it).
run: setup
	$(BIN)/mlgate serve

# The same policies, offline: they judge the shipped examples. Exit 1 (something denied) is
# the expected verdict here; only 2 (an error) fails the target.
demo: setup
	$(BIN)/mlgate validate examples/ ; test $$? -le 1

# Everything at once on a local control plane: etcd + kube-apiserver, the webhook, the reconciler and the audit
# as child processes; the examples applied with the real kubectl output printed. Ctrl-C stops what it started.
demo-cluster: setup control-plane
	$(BIN)/python tools/demo_cluster.py

# The whole suite, the end-to-end tests against a real etcd + kube-apiserver included.
test: setup control-plane
	$(BIN)/python -m pytest

# Only the end-to-end tests (real kubectl, real API server, the webhook as a process).
e2e: setup control-plane
	$(BIN)/python -m pytest -m e2e tests/e2e

# etcd from Debian's etcd-server package (apt-get, skipped when etcd is on PATH) and kube-apiserver
# built from k8s.io/kubernetes at tools/control-plane/VERSION, cached in ~/.cache/mlgate/k8s/v<version>/.
# The first build takes minutes; later runs find the cached binary and return at once.
# helm (tests/helm) is built the same way from helm.sh/helm/v3 at tools/control-plane/HELM_VERSION.
control-plane:
	tools/control-plane/etcd.sh
	tools/control-plane/kube-apiserver.sh
	tools/control-plane/pod-security-admission.sh
	tools/control-plane/helm.sh

# `make setup`, `mlgate validate` and `mlgate serve` on Debian's /usr/bin/python3 and every pyenv Python from 3.11,
# each in a venv of its own (the default python3 can hide a shadowed standard-library module). CI runs it.
stock-pythons:
	tools/stock-pythons.sh

# The light install (`pip install mlgate`, core dependencies only) and its tests (tests/light.args) on the same
# Pythons as stock-pythons, two at a time, each in a venv uv makes (about 5 minutes on 2 cores); CI runs it.
# GitHub Actions runs the same tests on macOS, Windows and Alpine (.github/workflows/platforms.yml, docs/platforms.md).
pythons: setup
	$(BIN)/pip install --quiet 'uv>=0.13,<0.14'
	tools/light-pythons.sh $(BIN)/uv

checks: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup
	$(BIN)/pip install --quiet 'yaml-rs>=0.1.6,<0.2'  # the `bench` extra: not in the lock, timed for reference
	$(BIN)/python bench/validate_bench.py
	$(BIN)/python bench/kinds_bench.py
	$(BIN)/python bench/schema_bench.py
	$(BIN)/python bench/builtin_schema_bench.py

bench-webhook: setup
	$(BIN)/python bench/webhook_bench.py
	$(BIN)/python bench/limits_bench.py
	$(BIN)/python bench/cel_bench.py --engine --mutations

# 1,000 PyTorchJobs created through a real kube-apiserver with and without mlgate's webhooks registered
bench-e2e: setup control-plane
	$(BIN)/python bench/e2e_bench.py

bench-reconciler: setup control-plane
	$(BIN)/python bench/reconcile_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
