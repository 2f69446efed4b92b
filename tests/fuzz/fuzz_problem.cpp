// Problem directories: problem.json + six .npy files (docs/problem-format.md), as the parts of
// one input (fuzz_util.h). load_problem validates everything; a bad problem must be a
// ProblemError, and a loaded one must pass validate_problem and have every page id it reads in range.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "fuzz_util.h"
#include "runtime/problem.h"

namespace {
constexpr const char* kFiles[] = {"problem.json", "q.npy", "kv.npy", "qo_indptr.npy",
                                  "kv_indptr.npy", "kv_indices.npy", "kv_last_page_lens.npy"};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = mla::fuzz::scratch_dir() / "problem";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto parts = mla::fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size), std::size(kFiles));
  for (size_t i = 0; i < parts.size(); ++i) mla::fuzz::write_file(dir / kFiles[i], parts[i]);
  try {
    mla::rt::Problem p = mla::rt::load_problem(dir.string());
    mla::rt::validate_problem(p, dir.string());
    // What a consumer does with a loaded problem: every token's page and element is in range
    // (a sparse problem's masked slots, -1 or past the cache, are never read: skipped).
    for (int b = 0; b < p.batch(); ++b) {
      const int len = p.kv_len(b);
      for (int t : {0, len - 1})
        if (!p.masked(b, t) && p.kv_elem(b, t, p.kv_row_elems() - 1) >= p.kv.count()) __builtin_trap();
    }
  } catch (const mla::rt::ProblemError&) {
  }
  return 0;
}
