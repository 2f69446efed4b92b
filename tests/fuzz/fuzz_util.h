// Shared pieces of the libFuzzer targets: a per-process scratch directory (the loaders take
// paths, so an input is written to a file first) and the split of one input into named files.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace mla::fuzz {

// $MLA_FUZZ_SCRATCH, else the temp directory; one folder per process (fuzz.sh may run two).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* env = std::getenv("MLA_FUZZ_SCRATCH");
    std::filesystem::path root = env && *env ? std::filesystem::path(env) : std::filesystem::temp_directory_path();
    std::filesystem::path d = root / ("mla-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

// Files of a multi-file input (a problem directory) are concatenated with this separator; a
// missing part leaves its file absent. tests/fuzz/make_seeds.sh writes seeds in this form.
inline constexpr std::string_view kPartSeparator = "\n--MLA-FUZZ-PART--\n";

inline std::vector<std::string_view> split_parts(std::string_view input, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t at = input.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace mla::fuzz
