// The emulator plugin's entry point (libmla_runtime_emulator.so; runtime/emulator_plugin.h).
#include "runtime/emulator_plugin.h"

#include <cstdio>
#include <exception>

#include "runtime/backend.h"
#include "runtime/rt_error.h"

namespace {
int report(char* error, size_t size, int status, const char* msg) {
  if (error && size) std::snprintf(error, size, "%s", msg);
  return status;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int mla_emulator_backend_create(
    uint32_t interface_version, const char* runtime_version, const char* target, mla::rt::Backend** out, char* error,
    size_t error_size) {
  if (interface_version != MLA_EMULATOR_PLUGIN_INTERFACE || !runtime_version ||
      std::string(runtime_version) != MLA_RUNTIME_VERSION) {
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "emulator plugin version mismatch: the plugin is runtime %s (interface %d), the runtime %s "
                  "(interface %u); install both from the same build",
                  MLA_RUNTIME_VERSION, MLA_EMULATOR_PLUGIN_INTERFACE, runtime_version ? runtime_version : "(null)",
                  interface_version);
    return report(error, error_size, MLA_ERROR_NO_DEVICE, msg);
  }
  if (!out || !target) return report(error, error_size, MLA_ERROR_INVALID_ARGUMENT, "null argument");
  try {
    *out = mla::rt::make_emulator_backend(target).release();
    return 0;
  } catch (const mla::rt::RtError& e) {
    return report(error, error_size, e.status, e.what());
  } catch (const std::exception& e) {
    return report(error, error_size, MLA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return report(error, error_size, MLA_ERROR_INTERNAL, "unknown exception");
  }
}
