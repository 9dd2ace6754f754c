#!/usr/bin/env bash
# Installs every build, test and demo dependency of ftrun from Debian 12 packages.
# Idempotent: does nothing (not even `apt-get update`) and prints nothing when all are present;
# otherwise it says which packages it installs and prints one line per package set up.
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ pkg-config
  libcli11-dev libboost1.81-dev libboost-filesystem1.81-dev libgrpc++-dev protobuf-compiler-grpc
  libprotobuf-dev protobuf-compiler libspdlog-dev libgtest-dev libgmock-dev
  # checkpoint files' CRC-32 and part directories' sha1 names; gRPC needs them anyway
  zlib1g-dev libssl-dev
  # tests, demo and benchmarks: Debian's torch (gloo) runs under /usr/bin/python3
  python3 python3-torch python3-yaml shellcheck iproute2 procps
  # tests: the rendezvous TLS tests make their certificates with the openssl CLI
  openssl
  # tests and benchmarks of --rdzv-backend etcd: a real etcd (3.4), started on loopback
  etcd-server
  # merged stacks of a hang (--hang-timeout, ftrun status --stacks): native stacks (eu-stack)
  elfutils
  # formatting check (scripts/check-format.sh, run by scripts/test.sh)
  clang-format
  # tests: `ftrun report`'s page is rendered in headless Chromium and what it draws is checked
  # (large: some 350 MB installed, even without recommends)
  chromium
  # packaging (cpack -G DEB): dpkg-shlibdeps
  dpkg-dev file
  # tests: fuzz_replay compiles the fuzz targets, one of which uses LLVM's header-only
  # FuzzedDataProvider (this package ships it)
  libclang-rt-14-dev
)
# --fuzz: also clang (libFuzzer and the sanitizer runtimes come with libclang-rt-14-dev).
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang) ;;
    *) echo "usage: $0 [--fuzz]" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() {
  cat "$log" >&2
  echo "install-deps: failed to install: ${missing[*]}" >&2
  exit 1
}
echo "install-deps: ${#missing[@]} Debian packages missing: ${missing[*]}"
echo "install-deps: apt-get update"
"${sudo[@]}" apt-get update -q >"$log" 2>&1 || fail
echo "install-deps: apt-get install (with what they need; one line per package set up)"
# apt's own output goes to the log (shown if it fails); the console gets its progress.
if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" 2>&1 |
  tee -a "$log" | awk '/^Setting up / { n++; printf "   [%d] %s\n", n, $3; fflush() }'; then
  fail
fi
echo "install-deps: done"
