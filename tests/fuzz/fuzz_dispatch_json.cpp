// `mlaemu run` dispatch JSON: the spec is parsed, its code object and buffers loaded, the kernarg
// packed and the kernel dispatched on the emulator. Every bad spec must be an mla::emu::Error.
//
// The harness keeps the run inside a sandbox before handing the spec over: file names must be
// plain names in the base directory (axpy.co, x.npy, y.npy; no reading /dev/stdin), outputs go
// to the scratch directory, and grids, workgroups and buffers are kept small so an input runs in
// milliseconds. Within those bounds every field goes to run_dispatch_json unchanged.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "emulator/dispatch_json.h"
#include "emulator/error.h"
#include "emulator/npy.h"
#include "fuzz_util.h"

namespace fs = std::filesystem;

namespace {

const fs::path& base_dir() {
  static const fs::path dir = [] {
    fs::path d = mla::fuzz::scratch_dir() / "dispatch";
    fs::create_directories(d);
    fs::copy_file(MLA_FUZZ_AXPY_CO, d / "axpy.co", fs::copy_options::overwrite_existing);
    std::vector<float> x(100), y(100);
    for (int i = 0; i < 100; ++i) x[i] = float(i), y[i] = 1000.0f - float(i);
    mla::npy::save((d / "x.npy").string(), mla::npy::make<float>("<f4", {100}, x));
    mla::npy::save((d / "y.npy").string(), mla::npy::make<float>("<f4", {100}, y));
    return d;
  }();
  return dir;
}

bool plain_name(const nlohmann::json& j) {
  if (!j.is_string()) return true;  // a non-string is the product's error to report
  const std::string s = j.get<std::string>();
  return s.find('/') == std::string::npos && s != "." && s != ".." && !s.empty();
}

// Items of a grid / block value as the product reads it (a number or [x, y, z]); unbounded
// values are left to the product's range checks as long as they cannot start a long run.
bool small_dims(const nlohmann::json& j, uint64_t max_items) {
  if (!j.is_array()) return !j.is_number_unsigned() || j.get<uint64_t>() <= max_items;
  uint64_t items = 1;
  for (const auto& v : j) {
    if (!v.is_number_unsigned()) continue;
    const uint64_t n = v.get<uint64_t>();
    if (n > max_items) return false;
    items *= n ? n : 1;
    if (items > max_items) return false;
  }
  return true;
}

bool within_sandbox(const nlohmann::json& spec) {
  if (!spec.is_object()) return true;
  if (spec.contains("code_object") && !plain_name(spec["code_object"])) return false;
  if (spec.contains("grid") && !small_dims(spec["grid"], 8)) return false;
  if (spec.contains("block") && !small_dims(spec["block"], 256)) return false;
  if (spec.contains("buffers") && spec["buffers"].is_array())
    for (const auto& b : spec["buffers"]) {
      if (!b.is_object()) continue;
      if (b.contains("init") && !plain_name(b["init"])) return false;
      if (b.contains("size") && b["size"].is_number_unsigned() && b["size"].get<uint64_t>() > (uint64_t(1) << 20)) return false;
    }
  if (spec.contains("options") && spec["options"].is_object()) {
    const auto& o = spec["options"];
    if (o.contains("trace")) return false;  // stderr noise only
    if (o.contains("dynamic_lds") && o["dynamic_lds"].is_number_unsigned() && o["dynamic_lds"].get<uint64_t>() > (1u << 20)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json spec = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!spec.is_discarded() && !within_sandbox(spec)) return 0;
  const fs::path path = base_dir() / "dispatch.json";
  mla::fuzz::write_file(path, text);
  mla::emu::RunOverrides ov;
  ov.out_dir = (mla::fuzz::scratch_dir() / "dispatch-out").string();
  try {
    (void)mla::emu::run_dispatch_json(path.string(), ov);
  } catch (const mla::emu::Error&) {
  }
  return 0;
}
