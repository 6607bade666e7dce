#!/usr/bin/env bash
# Build the helm v3 CLI from the published Go module helm.sh/helm/v3 at the pinned version
# (tools/control-plane/HELM_VERSION), cached per version outside the work tree:
#     ${MLGATE_HELM_CACHE:-~/.cache/mlgate/helm}/v<version>/helm
#
# helm's go.mod has no `replace` lines, so `go install module/cmd/helm@version` builds it as released.
# The -X flags are those of helm's own Makefile (v3.22.0): the version, and the Kubernetes version that
# `helm lint` and `helm template` assume, derived there from the k8s.io/client-go it requires (v0.Y -> 1.Y).
# A second run finds the binary and returns in well under a second.
#
# Environment: MLGATE_HELM_VERSION (default: the HELM_VERSION file), MLGATE_HELM_CACHE (the cache root),
# and Go's own GOPROXY, GOMODCACHE, GOCACHE.
set -euo pipefail

say() { echo "control-plane: $*"; }

die() {
    echo "control-plane: ERROR: $*" >&2
    echo "control-plane: the build log is $OUT/build.log; rerun with: make control-plane" >&2
    exit 1
}

main() {
    local here v out bin json why gomod client_go major minor pkg ldflags start
    here="$(cd "$(dirname "$0")" && pwd)"
    v="${MLGATE_HELM_VERSION:-$(tr -d '[:space:]' <"$here/HELM_VERSION")}"
    OUT="${MLGATE_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlgate/helm}/v$v"
    bin="$OUT/helm"

    if [ -x "$bin" ] && "$bin" version --template '{{.Version}}' 2>/dev/null | grep -qx "v$v"; then
        say "helm v$v cached: $bin"
        return 0
    fi
    mkdir -p "$OUT"
    : >"$OUT/build.log"
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (needed to build helm v$v)"
    # outside any module, so that no go.mod of the caller's is read or changed
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOWORK=off
    start=$(date +%s)
    say "building helm v$v with $(go version | cut -d' ' -f3) into $OUT (a cold build takes a few minutes)"

    say "[1/2] fetching helm.sh/helm/v3@v$v's go.mod from the module proxy"
    if ! json=$(cd "$OUT" && go mod download -json "helm.sh/helm/v3@v$v" 2>>"$OUT/build.log"); then
        why=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Error", ""))' \
              2>/dev/null || true)
        die "could not download helm.sh/helm/v3@v$v: ${why:-see the log} (GOPROXY=$(go env GOPROXY))"
    fi
    gomod=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
    client_go=$(sed -n 's|^[[:space:]]*k8s\.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$gomod" | head -n1)
    [ -n "$client_go" ] || die "no k8s.io/client-go v0.Y.Z in the go.mod of helm.sh/helm/v3@v$v"
    major=1 minor="$client_go"

    say "[2/2] compiling (go install on $(nproc) cores; assumes Kubernetes $major.$minor like the release)"
    pkg=helm.sh/helm/v3
    ldflags="-s -w -X $pkg/internal/version.version=v$v -X $pkg/internal/version.metadata="
    ldflags="$ldflags -X $pkg/internal/version.gitTreeState=clean"
    ldflags="$ldflags -X $pkg/pkg/lint/rules.k8sVersionMajor=$major -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor"
    ldflags="$ldflags -X $pkg/pkg/chartutil.k8sVersionMajor=$major -X $pkg/pkg/chartutil.k8sVersionMinor=$minor"
    rm -rf "$OUT/gobin"
    (cd "$OUT" && CGO_ENABLED=0 GOBIN="$OUT/gobin" go install -trimpath -ldflags "$ldflags" \
        "helm.sh/helm/v3/cmd/helm@v$v" >>"$OUT/build.log" 2>&1) \
        || { tail -n 30 "$OUT/build.log" >&2; die "go install of helm v$v failed"; }
    mv -f "$OUT/gobin/helm" "$bin"
    rmdir "$OUT/gobin"
    "$bin" version --template '{{.Version}}' | grep -qx "v$v" \
        || die "the built binary does not report v$v: $("$bin" version 2>&1)"
    say "helm v$v built in $(( $(date +%s) - start ))s: $bin"
}

main "$@"
