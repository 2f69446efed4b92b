// Shape configs: parse_config parses and validates; every bad input must be a ConfigError
// (anything else escaping, a crash or UB is a finding).
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    mla::gen::Config c = mla::gen::parse_config(text, "fuzz.json");
    // Every expanded kernel must be nameable (mlagen check lists the names).
    for (const auto& k : c.kernels) (void)k.name();
  } catch (const mla::gen::ConfigError&) {
  }
  return 0;
}
