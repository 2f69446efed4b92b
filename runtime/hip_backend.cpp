// HIP backend: hipModuleLoadData / hipModuleGetFunction / hipModuleLaunchKernel, built against
// Debian's libamdhip64-dev headers (no hipcc). Every HIP call is checked; a failure is an
// RtError naming the call and HIP's error. Compiled without HIP (MLA_HAVE_HIP unset), opening a
// device fails with MLA_ERROR_NO_DEVICE.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "runtime/backend.h"

#ifdef MLA_HAVE_HIP
#include <hip/hip_runtime_api.h>
#endif

namespace mla::rt {

void hip_kernarg_config(const std::vector<uint8_t>& kernarg, HipKernargConfig& c) {
  c.size = kernarg.size();
#ifdef MLA_HAVE_HIP
  c.extra[0] = HIP_LAUNCH_PARAM_BUFFER_POINTER;
  c.extra[2] = HIP_LAUNCH_PARAM_BUFFER_SIZE;
  c.extra[4] = HIP_LAUNCH_PARAM_END;
#else
  c.extra[0] = reinterpret_cast<void*>(1);
  c.extra[2] = reinterpret_cast<void*>(2);
  c.extra[4] = reinterpret_cast<void*>(3);
#endif
  c.extra[1] = const_cast<uint8_t*>(kernarg.data());
  c.extra[3] = &c.size;
}

#ifdef MLA_HAVE_HIP

bool hip_backend_available() { return true; }

namespace {

void check(hipError_t e, const char* call, mla_status status = MLA_ERROR_BACKEND) {
  if (e != hipSuccess)
    throw RtError(status, fmt::format("{} failed: {} ({})", call, hipGetErrorName(e), hipGetErrorString(e)));
}
#define HIP_CHECK(call) check((call), #call)

class HipBackend : public Backend {
 public:
  explicit HipBackend(int ordinal) : ordinal_(ordinal) {
    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if (e == hipErrorNoDevice || (e == hipSuccess && count == 0))
      throw RtError(MLA_ERROR_NO_DEVICE,
                    fmt::format("no AMD GPU found: hipGetDeviceCount returned {} (count {}); use the emulator "
                                "backend (MLA_BACKEND_EMULATOR) on this machine",
                                hipGetErrorName(e), count));
    check(e, "hipGetDeviceCount(&count)", MLA_ERROR_NO_DEVICE);
    if (ordinal < 0 || ordinal >= count)
      throw RtError(MLA_ERROR_NO_DEVICE, fmt::format("HIP device {} does not exist (allowed: 0..{})", ordinal, count - 1));
    check(hipSetDevice(ordinal), "hipSetDevice(ordinal)", MLA_ERROR_NO_DEVICE);
    hipDeviceProp_t p{};
    check(hipGetDeviceProperties(&p, ordinal), "hipGetDeviceProperties(&p, ordinal)", MLA_ERROR_NO_DEVICE);
    std::string arch = p.gcnArchName;
    target_ = arch.substr(0, arch.find(':'));
    if (target_.empty()) target_ = fmt::format("gfx{}", p.gcnArch);
    name_ = p.name;
    cus_ = p.multiProcessorCount;
  }
  ~HipBackend() override {
    // Teardown cannot report errors: best effort (a destructor must not throw).
    (void)hipSetDevice(ordinal_);
    for (auto& [path, m] : modules_) (void)hipModuleUnload(m.module);
  }
  mla_backend kind() const override { return MLA_BACKEND_HIP; }
  std::string target() const override { return target_; }
  std::string device_name() const override { return name_; }
  int num_cus() const override { return cus_; }

  uint64_t alloc(size_t bytes) override {
    select();
    void* p = nullptr;
    HIP_CHECK(hipMalloc(&p, bytes));
    hipError_t e = hipMemset(p, 0, bytes);
    if (e != hipSuccess) (void)hipFree(p);
    check(e, "hipMemset(p, 0, bytes)");
    return reinterpret_cast<uint64_t>(p);
  }
  void free(uint64_t ptr) override {
    select();
    HIP_CHECK(hipFree(reinterpret_cast<void*>(ptr)));
  }
  void h2d(uint64_t dst, const void* src, size_t n) override {
    select();
    HIP_CHECK(hipMemcpy(reinterpret_cast<void*>(dst), src, n, hipMemcpyHostToDevice));
  }
  void d2h(void* dst, uint64_t src, size_t n) override {
    select();
    HIP_CHECK(hipMemcpy(dst, reinterpret_cast<const void*>(src), n, hipMemcpyDeviceToHost));
  }
  void memset(uint64_t dst, int value, size_t n) override {
    select();
    HIP_CHECK(hipMemset(reinterpret_cast<void*>(dst), value, n));
  }
  void synchronize(void* stream) override {
    select();
    HIP_CHECK(hipStreamSynchronize(static_cast<hipStream_t>(stream)));
  }

  void ensure_module(const CatalogKernel& k) override { function(k); }

  void run(const std::vector<DecodeOp>& ops, void* stream_) override {
    select();
    hipStream_t stream = static_cast<hipStream_t>(stream_);
    for (const auto& op : ops) {
      switch (op.kind) {
        case DecodeOp::H2D:
          HIP_CHECK(hipMemcpyAsync(reinterpret_cast<void*>(op.dst), op.host, op.bytes, hipMemcpyHostToDevice, stream));
          break;
        case DecodeOp::Memset:
          HIP_CHECK(hipMemsetAsync(reinterpret_cast<void*>(op.dst), op.value, op.bytes, stream));
          break;
        case DecodeOp::Copy2D:
          HIP_CHECK(hipMemcpy2DAsync(reinterpret_cast<void*>(op.dst), op.dpitch, reinterpret_cast<const void*>(op.src),
                                     op.spitch, op.width, op.height, hipMemcpyDeviceToDevice, stream));
          break;
        case DecodeOp::Launch: {
          hipFunction_t f = function(*op.kernel);
          HipKernargConfig cfg;
          hip_kernarg_config(op.kernarg, cfg);
          hipError_t e = hipModuleLaunchKernel(f, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y,
                                               op.block.z, 0, stream, nullptr, cfg.extra);
          if (e != hipSuccess)
            throw RtError(MLA_ERROR_BACKEND, fmt::format("hipModuleLaunchKernel({}, grid {}x{}x{}, block {}) for {} "
                                                         "failed: {} ({})",
                                                         op.kernel->name, op.grid.x, op.grid.y, op.grid.z, op.block.x,
                                                         op.what, hipGetErrorName(e), hipGetErrorString(e)));
          break;
        }
      }
    }
  }

 private:
  struct Module {
    hipModule_t module = nullptr;
    std::map<std::string, hipFunction_t> functions;
  };
  void select() { HIP_CHECK(hipSetDevice(ordinal_)); }

  // Per-device module cache: each .co is checked (target, metadata) and loaded once.
  hipFunction_t function(const CatalogKernel& k) {
    std::lock_guard lk(mu_);
    auto it = modules_.find(k.co_path);
    if (it == modules_.end()) {
      CheckedCode code = load_checked_code(k, target_);
      select();
      Module m;
      HIP_CHECK(hipModuleLoadData(&m.module, code.bytes.data()));
      it = modules_.emplace(k.co_path, std::move(m)).first;
    }
    auto f = it->second.functions.find(k.name);
    if (f == it->second.functions.end()) {
      hipFunction_t fn = nullptr;
      HIP_CHECK(hipModuleGetFunction(&fn, it->second.module, k.name.c_str()));
      f = it->second.functions.emplace(k.name, fn).first;
    }
    return f->second;
  }

  int ordinal_;
  std::string target_, name_;
  int cus_ = 0;
  std::mutex mu_;
  std::map<std::string, Module> modules_;
};

}  // namespace

std::unique_ptr<Backend> make_hip_backend(int ordinal) { return std::make_unique<HipBackend>(ordinal); }

#else  // !MLA_HAVE_HIP

bool hip_backend_available() { return false; }

std::unique_ptr<Backend> make_hip_backend(int) {
  throw RtError(MLA_ERROR_NO_DEVICE,
                "this runtime was built without HIP (libamdhip64-dev not found at configure time); use the emulator "
                "backend");
}

#endif

}  // namespace mla::rt
