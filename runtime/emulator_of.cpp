// emulator_of (runtime/mla_runtime_internal.h): only where the emulator backend is linked in.
#include "runtime/emulator_backend.h"
#include "runtime/mla_runtime_internal.h"

namespace mla::rt {

EmulatorBackend* emulator_of(mla_device* dev) { return dynamic_cast<EmulatorBackend*>(&backend_of(dev)); }

}  // namespace mla::rt
