// .npy files: npy::load reads any bytes; every bad file must be a std::runtime_error naming the
// file, and a loaded array's payload must be exactly count() * item_size() bytes.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "emulator/npy.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = mla::fuzz::scratch_dir() / "input.npy";
  mla::fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    mla::npy::Array a = mla::npy::load(path.string());
    if (a.data.size() != a.count() * a.item_size()) __builtin_trap();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
