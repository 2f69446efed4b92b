// The few HIP types, constants and entry points the HIP backend uses, declared here rather than
// taken from <hip/hip_runtime_api.h>: libamdhip64 is loaded at run time (runtime/hip_backend.cpp),
// and these are the parts of its ABI that have not changed from ROCm 5.x to 7.x. Where HIP
// headers exist at configure time, runtime/hip_api_check.cpp checks every value below against them.
#pragma once
#include <cstddef>
#include <string>

namespace mla::rt::hip {

using Error = int;  // hipError_t (a C enum: int-sized)
inline constexpr Error kSuccess = 0;         // hipSuccess
inline constexpr Error kErrorNoDevice = 100; // hipErrorNoDevice
using Module = void*;    // hipModule_t
using Function = void*;  // hipFunction_t
using Stream = void*;    // hipStream_t
using MemcpyKind = int;  // hipMemcpyKind
inline constexpr MemcpyKind kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3;

// hipModuleLaunchKernel's `extra` keys (HIP_LAUNCH_PARAM_*).
inline void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(1);
inline void* const kLaunchParamBufferSize = reinterpret_cast<void*>(2);
inline void* const kLaunchParamEnd = reinterpret_cast<void*>(3);

// hipDeviceProp_t changed layout in ROCm 6.0, which added hipGetDevicePropertiesR0600 for the
// new one and kept hipGetDeviceProperties for the old (R0000). Only three fields are read, at
// their offsets in each layout; the buffer is larger than either struct.
struct DevicePropLayout {
  size_t name, multi_processor_count, gcn_arch_name;
};
inline constexpr DevicePropLayout kPropR0000{0, 336, 396};   // ROCm 5.x, sizeof 792
inline constexpr DevicePropLayout kPropR0600{0, 388, 1160};  // ROCm 6.0+, sizeof 1472
inline constexpr size_t kPropBufferBytes = 4096;
inline constexpr size_t kPropStringBytes = 256;  // name[256], gcnArchName[256]

// The entry points, resolved with dlsym.
struct Api {
  Error (*hipGetDeviceCount)(int*);
  Error (*hipSetDevice)(int);
  Error (*hipGetDeviceProperties)(void* prop, int device);  // R0000 or R0600, see `layout`
  Error (*hipMalloc)(void**, size_t);
  Error (*hipFree)(void*);
  Error (*hipMemcpy)(void*, const void*, size_t, MemcpyKind);
  Error (*hipMemset)(void*, int, size_t);
  Error (*hipMemcpyAsync)(void*, const void*, size_t, MemcpyKind, Stream);
  Error (*hipMemsetAsync)(void*, int, size_t, Stream);
  Error (*hipMemcpy2DAsync)(void*, size_t, const void*, size_t, size_t, size_t, MemcpyKind, Stream);
  Error (*hipStreamSynchronize)(Stream);
  Error (*hipHostMalloc)(void**, size_t, unsigned);  // page-locked host memory (flags 0: hipHostMallocDefault)
  Error (*hipHostFree)(void*);
  Error (*hipModuleLoadData)(Module*, const void*);
  Error (*hipModuleUnload)(Module);
  Error (*hipModuleGetFunction)(Function*, Module, const char*);
  Error (*hipModuleLaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 Stream, void**, void**);
  const char* (*hipGetErrorName)(Error);
  const char* (*hipGetErrorString)(Error);
  DevicePropLayout layout;
  std::string library;  // the path it was loaded from
};

}  // namespace mla::rt::hip
