#!/usr/bin/env bash
# Build kube-apiserver from the published Go module k8s.io/kubernetes at the pinned version
# (tools/control-plane/VERSION), cached per version outside the work tree:
#     ${MLGATE_K8S_CACHE:-~/.cache/mlgate/k8s}/v<version>/kube-apiserver
#
# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.x` does not work: k8s.io/kubernetes maps its
# staging modules (k8s.io/api, k8s.io/client-go, ...) to local folders with `replace`. So a tiny
# wrapper module requires k8s.io/kubernetes and replaces every staging module, read from the
# published go.mod of the pinned version, with its published v0.Y.Z.
# A second run finds the binary and returns in well under a second.
#
# Environment: MLGATE_K8S_VERSION (default: the VERSION file), MLGATE_K8S_CACHE (the cache root),
# and Go's own GOPROXY, GOMODCACHE, GOCACHE.
set -euo pipefail

say() { echo "control-plane: $*"; }

die() {
    echo "control-plane: ERROR: $*" >&2
    echo "control-plane: the build log is $OUT/build.log; rerun with: make control-plane" >&2
    exit 1
}

# The staging modules k8s.io/kubernetes@v$V maps to ./staging, from its published go.mod.
staging_modules() {
    local json why gomod
    if ! json=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@v$V" 2>>"$OUT/build.log"); then
        why=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Error", ""))' \
              2>/dev/null || true)
        die "could not download k8s.io/kubernetes@v$V: ${why:-see the log} (GOPROXY=$(go env GOPROXY))"
    fi
    gomod=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
    sed -n 's|^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*|\1|p' "$gomod"
}

# Runs where `set -e` is ignored (its status is tested), so every step says `|| return 1`.
write_wrapper() {
    local m
    cd "$WORK" || return 1
    go mod init example.invalid/mlgate-k8s-testbins >>"$OUT/build.log" 2>&1 || return 1
    go mod edit -require="k8s.io/kubernetes@v$V" || return 1
    for m in $STAGING; do
        go mod edit -replace="$m=$m@$STAGING_VERSION" || return 1
    done
    go mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver || return 1
}

main() {
    HERE="$(cd "$(dirname "$0")" && pwd)"
    V="${MLGATE_K8S_VERSION:-$(tr -d '[:space:]' <"$HERE/VERSION")}"
    CACHE_ROOT="${MLGATE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlgate/k8s}"
    OUT="$CACHE_ROOT/v$V"
    BIN="$OUT/kube-apiserver"
    WORK="$OUT/build"

    if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -qx "Kubernetes v$V"; then
        say "kube-apiserver v$V cached: $BIN"
        return 0
    fi
    mkdir -p "$WORK"
    : >"$OUT/build.log"
    command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (needed to build kube-apiserver v$V)"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOWORK=off
    local minor="${V#1.}"  # 1.35.4 -> 35.4
    STAGING_VERSION="v0.$minor"
    local start
    start=$(date +%s)
    say "building kube-apiserver v$V with $(go version | cut -d' ' -f3) into $OUT (a cold build takes minutes)"

    say "[1/4] fetching k8s.io/kubernetes@v$V's go.mod from the module proxy"
    rm -f "$WORK/go.mod" "$WORK/go.sum"
    STAGING=$(staging_modules)
    [ -n "$STAGING" ] || die "no staging replace lines in the go.mod of k8s.io/kubernetes@v$V"
    say "      $(echo "$STAGING" | wc -l) staging modules -> $STAGING_VERSION"

    say "[2/4] writing the wrapper module in $WORK"
    (write_wrapper) || die "could not write the wrapper module"

    say "[3/4] resolving dependencies (go mod tidy; a few hundred MB of modules on a cold cache)"
    (cd "$WORK" && go mod tidy >>"$OUT/build.log" 2>&1) \
        || { tail -n 20 "$OUT/build.log" >&2; die "go mod tidy failed"; }

    say "[4/4] compiling (go build on $(nproc) cores)"
    local pkg=k8s.io/component-base/version ldflags
    ldflags="-s -w -X $pkg.gitVersion=v$V -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*}"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (cd "$WORK" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN.tmp" \
        k8s.io/kubernetes/cmd/kube-apiserver >>"$OUT/build.log" 2>&1) \
        || { tail -n 30 "$OUT/build.log" >&2; die "go build of kube-apiserver v$V failed"; }
    mv -f "$BIN.tmp" "$BIN"
    "$BIN" --version | grep -qx "Kubernetes v$V" || die "the built binary does not report v$V: $("$BIN" --version)"
    say "kube-apiserver v$V built in $(( $(date +%s) - start ))s: $BIN"
}

main "$@"
exit
