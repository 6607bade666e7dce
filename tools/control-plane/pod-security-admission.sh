#!/usr/bin/env bash
# Fetch the Go module k8s.io/pod-security-admission at the version that goes with the pinned kube-apiserver
# (tools/control-plane/VERSION 1.Y.Z -> v0.Y.Z, as every staging module of k8s.io/kubernetes is published)
# into Go's module cache, and link it where the conformance tests look for it:
#     ${MLGATE_K8S_CACHE:-~/.cache/mlgate/k8s}/v<version>/pod-security-admission -> $GOMODCACHE/k8s.io/...
# tests/conformance/ judges every fixture of its test/testdata/ as the module's own code judges it.
# Idempotent: with the link in place (or the module already in the cache) it returns in well under a second.
#
# Environment: MLGATE_K8S_VERSION (default: the VERSION file), MLGATE_K8S_CACHE (the cache root),
# and Go's own GOPROXY, GOMODCACHE, GOSUMDB.
set -euo pipefail

say() { echo "control-plane: $*"; }
die() { echo "control-plane: ERROR: $*" >&2; echo "control-plane: rerun with: make control-plane" >&2; exit 1; }

main() {
    local here v module cache_root out link json dir why
    here="$(cd "$(dirname "$0")" && pwd)"
    v="${MLGATE_K8S_VERSION:-$(tr -d '[:space:]' <"$here/VERSION")}"
    module="k8s.io/pod-security-admission@v0.${v#1.}"  # 1.35.4 -> v0.35.4
    cache_root="${MLGATE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlgate/k8s}"
    out="$cache_root/v$v"
    link="$out/pod-security-admission"

    if [ -d "$link/test/testdata" ]; then
        say "$module cached: $link"
        return 0
    fi
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (needed to fetch $module)"
    mkdir -p "$out"
    # outside any module, so that no go.mod of the caller's is read or changed
    if ! json=$(cd "$out" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod go mod download -json "$module" 2>&1); then
        why=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Error", ""))' \
              2>/dev/null || true)
        die "could not download $module: ${why:-$json} (GOPROXY=$(go env GOPROXY))"
    fi
    dir=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    [ -d "$dir/test/testdata" ] || die "$module has no test/testdata in $dir"
    ln -sfn "$dir" "$link"
    say "$module: $(find "$dir/test/testdata" -name '*.yaml' | wc -l) fixtures, linked at $link"
}

main "$@"
