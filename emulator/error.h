// The emulator's one exception type: loader problems, unsupported instructions and every
// strictness violation are reported as mla::emu::Error with a complete human-readable message.
#pragma once
#include <stdexcept>
#include <string>

namespace mla::emu {

struct Error : std::runtime_error {
  // rule: short machine-readable tag of the violated rule ("waitcnt", "hazard", "lds_race",
  // "out_of_bounds", "register_range", "unsupported", "loader", "decode", "dispatch", ...).
  std::string rule;
  Error(std::string rule_, const std::string& msg) : std::runtime_error(msg), rule(std::move(rule_)) {}
};

}  // namespace mla::emu
