// The interface between libmla_runtime.so and the emulator plugin (libmla_runtime_emulator.so),
// which holds the emulator and LLVM so that the runtime library itself needs neither.
//
// The plugin is found next to libmla_runtime.so (dladdr) or at $MLA_EMULATOR_LIB, and loaded
// only when a caller opens MLA_BACKEND_EMULATOR. Its one entry point makes a Backend: a C++
// object of the runtime's own classes (Backend, DecodeOp, CatalogKernel, RtError), so both
// libraries must come from the same build; the interface version and the runtime version string
// are checked before the factory is trusted with anything else.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mla::rt {
class Backend;
}

// Bump on any change to the classes that cross the boundary (runtime/backend.h, catalog.h).
#define MLA_EMULATOR_PLUGIN_INTERFACE 1
#define MLA_EMULATOR_PLUGIN_FACTORY "mla_emulator_backend_create"

extern "C" {
// Makes an emulator backend for `target` ("gfx942" / "gfx950") into *out. 0 on success; else
// writes a NUL-terminated message into error[0..error_size) and returns the mla_status to report
// (MLA_ERROR_NO_DEVICE for a version mismatch). The caller owns *out (delete through Backend's
// virtual destructor, which runs the plugin's code: the plugin stays loaded for the process).
typedef int (*mla_emulator_backend_create_fn)(uint32_t interface_version, const char* runtime_version,
                                              const char* target, mla::rt::Backend** out, char* error,
                                              size_t error_size);
}
