#!/usr/bin/env bash
# Builds everything and runs the whole test suite through ctest, then the fuzz + sanitizer stage
# (scripts/fuzz.sh: the fuzz targets 30 s each, the config / loader / runtime unit tests under
# ASan + UBSan, in build-fuzz). MLA_SKIP_FUZZ=1 skips that stage.
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
"$top/scripts/setup.sh"
cd "$top/build"
ctest --output-on-failure -j "${MLA_JOBS:-$(nproc)}" "$@"
if [ "${MLA_SKIP_FUZZ:-0}" != 1 ]; then
  "$top/scripts/fuzz.sh"
fi
