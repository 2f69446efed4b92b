#!/usr/bin/env bash
# Installs what the build needs (Debian 12 packages) and configures + builds in build/.
# Sourced by ./generate.sh and ./test.sh; safe to run any number of times.
set -euo pipefail
PKGS=(cmake g++ ninja-build llvm-22 lld-22 llvm-22-dev clang-22 libclang-rt-22-dev libfmt-dev libcli11-dev
      nlohmann-json3-dev catch2 libamdhip64-dev libelf-dev libmsgpack-cxx-dev pkg-config python3 python3-numpy
      python3-torch python3-matplotlib)
# libclang-rt-22-dev: libFuzzer and the ASan / UBSan runtimes for scripts/fuzz.sh.
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${MLA_JOBS:-$(nproc)}
cmake -S "$top" -B "$top/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j "$jobs"
