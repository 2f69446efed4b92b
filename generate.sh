#!/usr/bin/env bash
# Builds the tools and generates the default catalog from configs/ into out/.
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
"$top/scripts/setup.sh"
"$top/build/generator/mlagen" build "$top"/configs/*.json --out "$top/out" -j "${MLA_JOBS:-$(nproc)}"
