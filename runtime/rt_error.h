// The runtime's error: a C API status and a message naming what is at fault.
#pragma once
#include <stdexcept>
#include <string>

#include "runtime/mla_runtime.h"

namespace mla::rt {

struct RtError : std::runtime_error {
  mla_status status;
  RtError(mla_status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

}  // namespace mla::rt
