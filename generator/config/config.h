// Shape configs: one JSON file per deployment, listing the kernels to build. Every bad
// input is a ConfigError naming the file, the field, the value and what is allowed.
//
// {
//   "deployment": "Kimi-K3 TP8 on MI355X",         (required, string)
//   "description": "...",                           (optional, string)
//   "kernels": [                                    (required, non-empty array)
//     { "kind": "mla_decode",                       (optional; default mla_decode; also
//                                                    vector_copy, fp8_dequant, mfma_tile)
//       "target": "gfx950" | ["gfx942", "gfx950"],
//       "heads": 12,                                (1..128)
//       "q_dtype": "fp8", "kv_dtype": "fp8",        (pairs fp8/fp8, bf16/fp8, bf16/bf16)
//       "qseqlen": 1 | [1, 2],                      (1..8)
//       "page_size": 128 | [1, 128],                (1 or a power of two up to 256)
//       "return_lse": false, "logit_cap": false }   (optional variant knobs)
//   ]
// }
// Lists expand to their cross product.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/kernel_spec.h"

namespace mla::gen {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Config {
  std::string path;
  std::string deployment;
  std::string description;
  std::vector<KernelSpec> kernels;  // expanded
};

// Parses and validates one file (throws ConfigError).
Config load_config(const std::string& path);
// Parses text as if read from `path` (for tests and messages).
Config parse_config(const std::string& text, const std::string& path);
// Loads several configs and checks that no two entries produce the same kernel for the
// same target (throws ConfigError naming both places).
std::vector<Config> load_configs(const std::vector<std::string>& paths);

}  // namespace mla::gen
