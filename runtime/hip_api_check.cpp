// Compiled only where HIP headers exist at configure time (ROCm's, or Debian's libamdhip64-dev):
// checks runtime/hip_api.h's own declarations against them. Nothing here is linked into a binary.
#include <cstddef>
#include <type_traits>

#include <hip/hip_runtime_api.h>

#include "runtime/hip_api.h"

namespace h = mla::rt::hip;

static_assert(sizeof(hipError_t) == sizeof(h::Error) && hipSuccess == h::kSuccess && hipErrorNoDevice == h::kErrorNoDevice);
static_assert(sizeof(hipMemcpyKind) == sizeof(h::MemcpyKind) && hipMemcpyHostToDevice == h::kHostToDevice &&
              hipMemcpyDeviceToHost == h::kDeviceToHost && hipMemcpyDeviceToDevice == h::kDeviceToDevice);
static_assert(std::is_pointer_v<hipModule_t> && std::is_pointer_v<hipFunction_t> && std::is_pointer_v<hipStream_t>);
static_assert(sizeof(hipModule_t) == sizeof(h::Module) && sizeof(hipFunction_t) == sizeof(h::Function) &&
              sizeof(hipStream_t) == sizeof(h::Stream));
#if defined(HIP_VERSION_MAJOR) && HIP_VERSION_MAJOR >= 6
// Since ROCm 6, hipDeviceProp_t is the R0600 layout.
static_assert(offsetof(hipDeviceProp_tR0600, name) == h::kPropR0600.name);
static_assert(offsetof(hipDeviceProp_tR0600, multiProcessorCount) == h::kPropR0600.multi_processor_count);
static_assert(offsetof(hipDeviceProp_tR0600, gcnArchName) == h::kPropR0600.gcn_arch_name);
static_assert(sizeof(hipDeviceProp_tR0600) <= h::kPropBufferBytes);
#else
static_assert(offsetof(hipDeviceProp_t, name) == h::kPropR0000.name);
static_assert(offsetof(hipDeviceProp_t, multiProcessorCount) == h::kPropR0000.multi_processor_count);
static_assert(offsetof(hipDeviceProp_t, gcnArchName) == h::kPropR0000.gcn_arch_name);
static_assert(sizeof(hipDeviceProp_t) <= h::kPropBufferBytes);
#endif
