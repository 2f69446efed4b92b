// HIP backend: hipModuleLoadData / hipModuleGetFunction / hipModuleLaunchKernel on libamdhip64,
// which is found at run time (as Triton's AMD driver does) rather than linked: the library already
// loaded in the process first (a PyTorch or vLLM host has one), else $ROCM_PATH/lib, libamdhip64.so
// on the loader path, /opt/rocm/lib, then the versioned sonames distributions ship. The entry
// points are resolved with dlsym (runtime/hip_api.h). Every HIP call is checked; a failure is an
// RtError naming the call and HIP's error. Without a HIP runtime, opening a device fails with
// MLA_ERROR_NO_DEVICE naming the paths tried.
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/hip_api.h"

namespace mla::rt {

void hip_kernarg_config(const std::vector<uint8_t>& kernarg, HipKernargConfig& c) {
  c.size = kernarg.size();
  c.extra[0] = hip::kLaunchParamBufferPointer;
  c.extra[1] = const_cast<uint8_t*>(kernarg.data());
  c.extra[2] = hip::kLaunchParamBufferSize;
  c.extra[3] = &c.size;
  c.extra[4] = hip::kLaunchParamEnd;
}

namespace {

// The path of a libamdhip64 already mapped into the process, if any.
std::optional<std::string> loaded_hip_library() {
  std::optional<std::string> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* path = info->dlpi_name;
        const char* base = path ? std::strrchr(path, '/') : nullptr;
        base = base ? base + 1 : path;
        if (!base || std::strncmp(base, "libamdhip64.so", 14) != 0) return 0;
        *static_cast<std::optional<std::string>*>(out) = path;
        return 1;
      },
      &found);
  return found;
}

struct LoadedApi {
  std::optional<hip::Api> api;
  std::string error;  // why there is none
};

LoadedApi load_api() {
  std::vector<std::pair<std::string, int>> candidates;  // path, extra dlopen flags
  if (auto p = loaded_hip_library()) candidates.emplace_back(*p, RTLD_NOLOAD);
  // An explicit $ROCM_PATH before the loader path: a distribution's libamdhip64 on the loader
  // path (Debian's ROCm 5.2) must not shadow the ROCm the user named.
  if (const char* r = std::getenv("ROCM_PATH"); r && *r) candidates.emplace_back(std::string(r) + "/lib/libamdhip64.so", 0);
  candidates.emplace_back("libamdhip64.so", 0);
  candidates.emplace_back("/opt/rocm/lib/libamdhip64.so", 0);
  for (const char* soname : {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}) candidates.emplace_back(soname, 0);

  LoadedApi out;
  std::string tried;
  for (const auto& [path, flags] : candidates) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | flags);
    if (!h) {
      const char* e = dlerror();
      tried += fmt::format("\n  {}: {}", path, e ? e : "not found");
      continue;
    }
    hip::Api a{};
    std::string missing;
    auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) missing += fmt::format(" {}", name);
    };
    resolve(a.hipGetDeviceCount, "hipGetDeviceCount");
    resolve(a.hipSetDevice, "hipSetDevice");
    a.hipGetDeviceProperties = reinterpret_cast<decltype(a.hipGetDeviceProperties)>(dlsym(h, "hipGetDevicePropertiesR0600"));
    a.layout = hip::kPropR0600;
    if (!a.hipGetDeviceProperties) {  // ROCm 5.x: only the old layout
      resolve(a.hipGetDeviceProperties, "hipGetDeviceProperties");
      a.layout = hip::kPropR0000;
    }
    resolve(a.hipMalloc, "hipMalloc");
    resolve(a.hipFree, "hipFree");
    resolve(a.hipMemcpy, "hipMemcpy");
    resolve(a.hipMemset, "hipMemset");
    resolve(a.hipMemcpyAsync, "hipMemcpyAsync");
    resolve(a.hipMemsetAsync, "hipMemsetAsync");
    resolve(a.hipMemcpy2DAsync, "hipMemcpy2DAsync");
    resolve(a.hipStreamSynchronize, "hipStreamSynchronize");
    resolve(a.hipHostMalloc, "hipHostMalloc");
    resolve(a.hipHostFree, "hipHostFree");
    resolve(a.hipModuleLoadData, "hipModuleLoadData");
    resolve(a.hipModuleUnload, "hipModuleUnload");
    resolve(a.hipModuleGetFunction, "hipModuleGetFunction");
    resolve(a.hipModuleLaunchKernel, "hipModuleLaunchKernel");
    resolve(a.hipGetErrorName, "hipGetErrorName");
    resolve(a.hipGetErrorString, "hipGetErrorString");
    if (!missing.empty()) {
      tried += fmt::format("\n  {}: loaded, but lacks{}", path, missing);
      dlclose(h);
      continue;
    }
    a.library = path;
    out.api = a;  // the library stays loaded for the process (backends call into it)
    return out;
  }
  out.error = fmt::format(
      "no HIP runtime found: libamdhip64 could not be loaded (install ROCm, or set ROCM_PATH); use the emulator "
      "backend (MLA_BACKEND_EMULATOR) on a machine without one. Tried:{}",
      tried);
  return out;
}

const LoadedApi& api_once() {
  static const LoadedApi loaded = load_api();
  return loaded;
}

const hip::Api& api() {
  const LoadedApi& l = api_once();
  if (!l.api) throw RtError(MLA_ERROR_NO_DEVICE, l.error);
  return *l.api;
}

std::string error_text(hip::Error e) {
  const hip::Api& a = api();
  const char* n = a.hipGetErrorName(e);
  const char* s = a.hipGetErrorString(e);
  return fmt::format("{} ({})", n ? n : "hipError?", s ? s : "");
}

void check(hip::Error e, const char* call, mla_status status = MLA_ERROR_BACKEND) {
  if (e != hip::kSuccess) throw RtError(status, fmt::format("{} failed: {}", call, error_text(e)));
}
// HIP_CHECK(hipMalloc, &p, n): calls the loaded entry point, naming the call as HIP spells it.
#define HIP_CHECK(fn, ...) check(hip.fn(__VA_ARGS__), #fn "(" #__VA_ARGS__ ")")

// A NUL-terminated string field of a device-properties buffer (never read past the field).
std::string prop_string(const unsigned char* props, size_t offset) {
  const char* p = reinterpret_cast<const char*>(props + offset);
  return std::string(p, strnlen(p, hip::kPropStringBytes));
}

class HipBackend : public Backend {
 public:
  explicit HipBackend(int ordinal) : hip(api()), ordinal_(ordinal) {
    int count = 0;
    hip::Error e = hip.hipGetDeviceCount(&count);
    if (e == hip::kErrorNoDevice || (e == hip::kSuccess && count == 0))
      throw RtError(MLA_ERROR_NO_DEVICE,
                    fmt::format("no AMD GPU found: hipGetDeviceCount returned {} (count {}; HIP runtime {}); use the "
                                "emulator backend (MLA_BACKEND_EMULATOR) on this machine",
                                hip.hipGetErrorName(e), count, hip.library));
    check(e, "hipGetDeviceCount(&count)", MLA_ERROR_NO_DEVICE);
    if (ordinal < 0 || ordinal >= count)
      throw RtError(MLA_ERROR_NO_DEVICE, fmt::format("HIP device {} does not exist (allowed: 0..{})", ordinal, count - 1));
    check(hip.hipSetDevice(ordinal), "hipSetDevice(ordinal)", MLA_ERROR_NO_DEVICE);
    std::vector<unsigned char> buffer(hip::kPropBufferBytes, 0);  // operator new: aligned for the struct
    const unsigned char* props = buffer.data();
    check(hip.hipGetDeviceProperties(buffer.data(), ordinal), "hipGetDeviceProperties(&props, ordinal)",
          MLA_ERROR_NO_DEVICE);
    std::string arch = prop_string(props, hip.layout.gcn_arch_name);
    target_ = arch.substr(0, arch.find(':'));
    if (target_.rfind("gfx", 0) != 0)
      throw RtError(MLA_ERROR_NO_DEVICE, fmt::format("HIP device {}: gcnArchName '{}' is not a gfx target (HIP "
                                                     "runtime {}: an unknown hipDeviceProp_t layout?)",
                                                     ordinal, arch, hip.library));
    name_ = prop_string(props, hip.layout.name);
    std::memcpy(&cus_, props + hip.layout.multi_processor_count, sizeof cus_);
  }
  ~HipBackend() override {
    // Teardown cannot report errors: best effort (a destructor must not throw).
    (void)hip.hipSetDevice(ordinal_);
    for (auto& [path, m] : modules_) (void)hip.hipModuleUnload(m.module);
  }
  mla_backend kind() const override { return MLA_BACKEND_HIP; }
  std::string target() const override { return target_; }
  std::string device_name() const override { return name_; }
  int num_cus() const override { return cus_; }

  uint64_t alloc(size_t bytes) override {
    select();
    void* p = nullptr;
    HIP_CHECK(hipMalloc, &p, bytes);
    hip::Error e = hip.hipMemset(p, 0, bytes);
    if (e != hip::kSuccess) (void)hip.hipFree(p);
    check(e, "hipMemset(p, 0, bytes)");
    return reinterpret_cast<uint64_t>(p);
  }
  void free(uint64_t ptr) override {
    select();
    HIP_CHECK(hipFree, reinterpret_cast<void*>(ptr));
  }
  void h2d(uint64_t dst, const void* src, size_t n) override {
    select();
    HIP_CHECK(hipMemcpy, reinterpret_cast<void*>(dst), src, n, hip::kHostToDevice);
  }
  void d2h(void* dst, uint64_t src, size_t n) override {
    select();
    HIP_CHECK(hipMemcpy, dst, reinterpret_cast<const void*>(src), n, hip::kDeviceToHost);
  }
  void memset(uint64_t dst, int value, size_t n) override {
    select();
    HIP_CHECK(hipMemset, reinterpret_cast<void*>(dst), value, n);
  }
  void synchronize(void* stream) override {
    select();
    HIP_CHECK(hipStreamSynchronize, stream);
  }

  void* host_alloc(size_t bytes) override {
    select();
    void* p = nullptr;
    HIP_CHECK(hipHostMalloc, &p, bytes, 0u);
    return p;
  }
  void host_free(void* p) override {
    if (!p) return;
    select();
    HIP_CHECK(hipHostFree, p);
  }

  void ensure_module(const CatalogKernel& k) override { function(k); }

  void run(const std::vector<DecodeOp>& ops, void* stream) override {
    select();
    for (const auto& op : ops) {
      switch (op.kind) {
        case DecodeOp::H2D:
          HIP_CHECK(hipMemcpyAsync, reinterpret_cast<void*>(op.dst), op.host, op.bytes, hip::kHostToDevice, stream);
          break;
        case DecodeOp::Memset:
          HIP_CHECK(hipMemsetAsync, reinterpret_cast<void*>(op.dst), op.value, op.bytes, stream);
          break;
        case DecodeOp::Copy2D:
          HIP_CHECK(hipMemcpy2DAsync, reinterpret_cast<void*>(op.dst), op.dpitch, reinterpret_cast<const void*>(op.src),
                    op.spitch, op.width, op.height, hip::kDeviceToDevice, stream);
          break;
        case DecodeOp::Launch: {
          hip::Function f = function(*op.kernel);
          HipKernargConfig cfg;
          hip_kernarg_config(op.kernarg, cfg);
          hip::Error e = hip.hipModuleLaunchKernel(f, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y,
                                                   op.block.z, 0, stream, nullptr, cfg.extra);
          if (e != hip::kSuccess)
            throw RtError(MLA_ERROR_BACKEND, fmt::format("hipModuleLaunchKernel({}, grid {}x{}x{}, block {}) for {} "
                                                         "failed: {}",
                                                         op.kernel->name, op.grid.x, op.grid.y, op.grid.z, op.block.x,
                                                         op.what, error_text(e)));
          break;
        }
      }
    }
  }

 private:
  struct Module {
    hip::Module module = nullptr;
    std::map<std::string, hip::Function> functions;
  };
  void select() { HIP_CHECK(hipSetDevice, ordinal_); }

  // Per-device module cache: each .co is checked (target, metadata) and loaded once.
  hip::Function function(const CatalogKernel& k) {
    std::lock_guard lk(mu_);
    auto it = modules_.find(k.co_path);
    if (it == modules_.end()) {
      CheckedCode code = load_checked_code(k, target_);
      select();
      Module m;
      HIP_CHECK(hipModuleLoadData, &m.module, code.bytes.data());
      it = modules_.emplace(k.co_path, std::move(m)).first;
    }
    auto f = it->second.functions.find(k.name);
    if (f == it->second.functions.end()) {
      hip::Function fn = nullptr;
      HIP_CHECK(hipModuleGetFunction, &fn, it->second.module, k.name.c_str());
      f = it->second.functions.emplace(k.name, fn).first;
    }
    return f->second;
  }

  const hip::Api& hip;
  int ordinal_;
  std::string target_, name_;
  int cus_ = 0;
  std::mutex mu_;
  std::map<std::string, Module> modules_;
};

}  // namespace

bool hip_backend_available() { return api_once().api.has_value(); }

std::unique_ptr<Backend> make_hip_backend(int ordinal) { return std::make_unique<HipBackend>(ordinal); }

}  // namespace mla::rt
