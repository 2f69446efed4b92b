#!/usr/bin/env bash
# Builds everything and runs the whole test suite through ctest.
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
"$top/scripts/setup.sh"
cd "$top/build"
ctest --output-on-failure -j "${MLA_JOBS:-$(nproc)}" "$@"
