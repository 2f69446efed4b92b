#!/usr/bin/env bash
# Packs a problem directory (mlarun make-problem) into one fuzz_problem input: its seven files in
# fuzz_problem.cpp's order, joined by the part separator of fuzz_util.h.
#   build-fuzz/runtime/mlarun make-problem /tmp/p --heads 1 --page-size 16 --kv-lens 17,5
#   tests/fuzz/make_problem_seed.sh /tmp/p tests/fuzz/corpus/fuzz_problem/h1_pg16.bin
set -euo pipefail
dir=$1 out=$2
: >"$out"
first=1
for f in problem.json q.npy kv.npy qo_indptr.npy kv_indptr.npy kv_indices.npy kv_last_page_lens.npy; do
  [ $first = 1 ] || printf '\n--MLA-FUZZ-PART--\n' >>"$out"
  first=0
  cat "$dir/$f" >>"$out"
done
