// MLA HIP test device: a libamdhip64.so for machines without an AMD GPU (CI), built on the
// project's emulator, so that the runtime's HIP backend (runtime/hip_backend.cpp, which dlopens
// libamdhip64) executes end to end. It is a test fixture: never installed, and its device name
// says what it is ("MLA HIP test device (emulator gfx942)").
//
//   ROCM_PATH=<build>/hip_test_device            ($ROCM_PATH/lib/libamdhip64.so, which the runtime
//                                                tries before the loader path), or
//   LD_LIBRARY_PATH=<build>/hip_test_device/lib  found first on the loader path
//   MLA_HIP_TEST_DEVICE_TARGET=gfx942|gfx950     the emulated GPU (default gfx942)
//   MLA_HIP_TRACE=FILE                           append one line per HIP call to FILE
//
// What it provides: the HIP runtime subset the runtime resolves plus what a host program needs
// around it (device query, memory, copies, memsets, streams, modules, launches with `extra`
// kernargs, stream capture into graphs, error names), compiled against HIP's own headers
// (<hip/hip_runtime_api.h>: enum values, struct layouts and signatures are HIP's), exported with
// C linkage. One device (ordinal 0).
//
// Semantics, as a real HIP runtime (ROCm's clr) behaves where it defines them:
//  - Every call validates its arguments and returns HIP's error: null out-pointers and bad
//    sizes hipErrorInvalidValue, unknown streams hipErrorContextIsDestroyed, unknown modules /
//    functions hipErrorInvalidResourceHandle, a memcpy direction that does not fit the pointers
//    hipErrorInvalidMemcpyDirection. Failures are remembered for hipGetLastError (per thread,
//    cleared by reading it).
//  - Device memory is the emulator's (mla::emu::Device): hipMalloc'd memory is filled with 0xA5
//    (real device memory is not zeroed), allocations are separated by unmapped gaps. A copy or
//    memset touching bytes outside one allocation is an error, never a crash:
//    hipErrorInvalidValue when the range starts inside an allocation and runs past its end (as
//    clr), hipErrorInvalidDevicePointer when the device side is no allocation at all (freed,
//    never allocated) for copies, hipErrorInvalidValue for memsets (as clr). A kernel touching
//    memory outside every allocation fails its launch with hipErrorIllegalAddress; any other
//    emulator violation (waitcnt, hazards, LDS races, unsupported instructions: the emulator's
//    strict checks, the defaults the runtime's emulator backend dispatches with) with
//    hipErrorLaunchFailure; the emulator's message goes to stderr. Kernels cannot read host
//    memory (pinned or not): canMapHostMemory is 0.
//  - hipHostMalloc returns host memory (filled with 0xA5) that the device remembers as pinned;
//    copies from / to it are traced as pinned, other host memory as pageable.
//  - Streams execute their work at enqueue time, in order (synchronously); a launch returns
//    the kernel's error itself (a real GPU reports it at the next synchronisation).
//  - Stream capture (hipStreamBeginCapture .. hipStreamEndCapture): each operation enqueued on a
//    capturing stream is validated and recorded into the graph instead of executed: a launch's
//    kernarg bytes are copied at capture time (as HIP does), a copy records its pointers, so a
//    host-to-device copy reads the host memory at replay (as HIP does for pinned memory).
//    hipGraphInstantiate snapshots the graph; hipGraphLaunch replays its operations in order on
//    the stream, validating each again (memory freed since capture is an error), and stops at
//    the first failure. While any capture is active: hipMalloc / hipFree / hipHostMalloc /
//    hipHostFree (global-mode captures, and thread-local ones of the calling thread) invalidate
//    them and return hipErrorStreamCaptureUnsupported; hipMemcpy / hipMemset (synchronous)
//    invalidate every capture and return hipErrorStreamCaptureImplicit; hipDeviceSynchronize
//    invalidates every capture and returns hipErrorStreamCaptureUnsupported;
//    hipStreamSynchronize of a capturing stream returns hipErrorStreamCaptureUnsupported. Work
//    enqueued on an invalidated capture returns hipErrorStreamCaptureInvalidated, and so does
//    its hipStreamEndCapture (graph null). Only single-stream captures (no events, no forks).
//  - hipModuleLoadData takes a code object (ELF) for the emulated target: one for another GPU
//    is hipErrorNoBinaryForGpu, anything else the emulator cannot load hipErrorInvalidImage
//    (offload bundles are not supported). Launches take their arguments through `extra`
//    ({HIP_LAUNCH_PARAM_BUFFER_POINTER, p, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
//    HIP_LAUNCH_PARAM_END}); the buffer must cover the kernel's explicit arguments and fit its
//    kernarg segment (hipErrorInvalidValue otherwise); `kernelParams` is hipErrorNotSupported.
//    sharedMemBytes is the dispatch's dynamic LDS.
//  - Device properties (hipGetDevicePropertiesR0600, the ROCm 6+ layout, and
//    hipGetDeviceProperties, the layout of the HIP headers it is compiled against): name
//    "MLA HIP test device (emulator <gfx>)", gcnArchName the product's target ID
//    ("gfx942:sramecc+:xnack-"), multiProcessorCount the product's CU count (304 / 256, what the
//    emulator backend reports, so that both backends plan alike), totalGlobalMem the host's RAM
//    (device memory lives there; hipMalloc beyond it is hipErrorOutOfMemory).
//
// Trace format (MLA_HIP_TRACE=FILE; the file is appended to, one line per call, written when
// the call returns; fields are space-separated key=value, values never contain spaces; grep
// '^hipModuleLaunchKernel .*function=NAME', ' captured ', 'dir=H2D host=pinned', ...):
//
//   <call> [key=value ...] [captured] -> <hipError_t name>
//
//   stream=N        0 the null stream, pt hipStreamPerThread, N >= 1 the Nth hipStreamCreate
//   dir=H2D|D2H|D2D|H2H   copies (hipMemcpyDefault resolved from the pointers); a copy the
//                   device refused, or one of 0 bytes, shows its hipMemcpyKind as given (kind=N)
//   host=pinned|pageable  the host side of an H2D / D2H copy (pinned: inside a hipHostMalloc block)
//   bytes=N         copy / memset / allocation size (2D copies: width * height; then also
//                   width= height= dpitch= spitch=); dst= src= ptr= are addresses
//   function=NAME grid=XxYxZ block=XxYxZ shared=N kernarg=N   launches (kernarg: buffer bytes)
//   fault=RULE      a launch the emulator stopped (out_of_bounds, waitcnt, ...)
//   mach=0xNN module=N target=gfxNNN bytes=N kernels=N   hipModuleLoadData (mach: the image's
//                   EF_AMDGPU_MACH); hipModuleGetFunction names function= and module=
//   graph=N exec=N ops=N   hipStreamEndCapture / hipGraphInstantiate / hipGraphLaunch (N >= 1
//                   in creation order; ops: the recorded operations)
//   mode= status=   hipStreamBeginCapture (global|thread_local|relaxed) / hipStreamIsCapturing
//   captured        the operation was validated and recorded into the stream's capture, not run
//
// hipGraphLaunch first writes one line per replayed operation, led by `replay` and naming the
// call that recorded it, then its own line. A capture of two operations and one replay:
//
//   hipStreamBeginCapture stream=1 mode=global -> hipSuccess
//   hipMemcpyAsync stream=1 dir=H2D host=pinned bytes=37888 dst=0x1000c5000 src=0x5628fa617000 captured -> hipSuccess
//   hipModuleLaunchKernel stream=1 function=mla_merge_attn_states grid=37x1x1 block=64x1x1 shared=0 kernarg=56 captured -> hipSuccess
//   hipStreamEndCapture stream=1 graph=1 ops=2 -> hipSuccess
//   hipGraphInstantiate graph=1 exec=1 ops=2 -> hipSuccess
//   replay hipMemcpyAsync stream=1 exec=1 dir=H2D host=pinned bytes=37888 dst=0x1000c5000 src=0x5628fa617000 -> hipSuccess
//   replay hipModuleLaunchKernel stream=1 exec=1 function=mla_merge_attn_states grid=37x1x1 block=64x1x1 shared=0 kernarg=56 -> hipSuccess
//   hipGraphLaunch stream=1 exec=1 graph=1 ops=2 -> hipSuccess
//
// hipGetErrorName / hipGetErrorString return strings: their lines are `hipGetErrorName error=N
// name=hipError...` with no `->` part.
//
// Why the emulator library is linked in rather than reached through the runtime's emulator
// plugin: the plugin's interface is the runtime's own Backend (decode operations over catalog
// kernels), which is the code under test; the test device needs the plain device (allocations,
// bounds, dispatch of arbitrary code-object bytes) and must not share code with the runtime
// it checks. Its own symbols (the emulator, LLVM's users) are hidden: only hip* is exported.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <hip/hip_runtime_api.h>

#include "abi/mla_abi.h"
#include "emulator/code_object.h"
#include "emulator/device.h"
#include "emulator/error.h"
#include "tests/hip_test_device/device_prop_r0600.h"

namespace emu = mla::emu;

// The opaque handle types of <hip/hip_runtime_api.h> (declared there, defined here).
struct ihipStream_t;
struct ihipModule_t;
struct ihipModuleSymbol_t;
struct ihipGraph;
struct hipGraphExec;

namespace {

constexpr uint8_t kPoison = 0xA5;  // fill of hipMalloc / hipHostMalloc memory

enum class Dir { H2D, D2H, D2D, H2H };
const char* dir_name(Dir d) {
  switch (d) {
    case Dir::H2D: return "H2D";
    case Dir::D2H: return "D2H";
    case Dir::D2D: return "D2D";
    case Dir::H2H: return "H2H";
  }
  return "?";
}

// One stream operation: executed at enqueue time, or recorded by a capture and replayed.
struct Op {
  enum Kind { Copy, Memset, Copy2D, Launch } kind = Copy;
  const char* call = "";  // the HIP call that enqueued it
  hipMemcpyKind memcpy_kind = hipMemcpyDefault;  // as given (resolved again at replay)
  Dir dir = Dir::H2D;
  bool resolved = false;  // `dir` is known (the pointers were checked)
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;  // Copy / Memset
  int value = 0;     // Memset
  size_t dpitch = 0, spitch = 0, width = 0, height = 0;  // Copy2D
  std::shared_ptr<const emu::CodeObject> co;             // Launch (kept alive by the graph)
  std::string function;
  emu::Dim3 grid, block;
  unsigned shared = 0;
  std::vector<uint8_t> kernarg;  // copied at enqueue / capture time
};

}  // namespace

struct ihipStream_t {
  int id = 0;
  hipStreamCaptureStatus capture = hipStreamCaptureStatusNone;
  hipStreamCaptureMode mode = hipStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::vector<Op> ops;  // the capture's operations
};

struct ihipModuleSymbol_t {
  ihipModule_t* module = nullptr;
  const emu::Kernel* kernel = nullptr;
};

struct ihipModule_t {
  int id = 0;
  std::shared_ptr<const emu::CodeObject> co;
  std::map<std::string, std::unique_ptr<ihipModuleSymbol_t>> functions;
};

struct ihipGraph {
  int id = 0;
  std::vector<Op> ops;
};

struct hipGraphExec {
  int id = 0, graph = 0;
  std::vector<Op> ops;
};

namespace {

// ---- Device state --------------------------------------------------------------------------

struct State {
  bool ok = false;  // MLA_HIP_TEST_DEVICE_TARGET is valid
  emu::Gfx gfx = emu::Gfx::gfx942;
  const mla::abi::TargetFacts* facts = nullptr;
  std::unique_ptr<emu::Device> dev;
  size_t total_mem = 0;
  int trace_fd = -1;
  uint64_t mallocs = 0;
  std::map<uintptr_t, size_t> pinned;  // hipHostMalloc blocks: base -> bytes
  std::map<ihipStream_t*, std::unique_ptr<ihipStream_t>> streams;
  std::map<ihipModule_t*, std::unique_ptr<ihipModule_t>> modules;
  std::set<ihipModuleSymbol_t*> functions;
  std::map<ihipGraph*, std::unique_ptr<ihipGraph>> graphs;
  std::map<hipGraphExec*, std::unique_ptr<hipGraphExec>> execs;
  int next_stream = 1, next_module = 1, next_graph = 1, next_exec = 1;
};

std::recursive_mutex g_mu;
thread_local hipError_t t_last_error = hipSuccess;

void note(const std::string& msg) { std::fprintf(stderr, "mla_hip_test_device: %s\n", msg.c_str()); }

State& state() {
  static State* st = [] {
    auto* s = new State;  // never destroyed: HIP calls may come from other libraries' destructors
    const char* t = std::getenv("MLA_HIP_TEST_DEVICE_TARGET");
    std::string target = t && *t ? t : "gfx942";
    if (target == "gfx942" || target == "gfx950") {
      s->gfx = target == "gfx942" ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
      s->facts = &mla::abi::facts(target == "gfx942" ? mla::abi::Target::gfx942 : mla::abi::Target::gfx950);
      s->dev = std::make_unique<emu::Device>(s->gfx);
      s->ok = true;
    } else {
      note(fmt::format("MLA_HIP_TEST_DEVICE_TARGET='{}' (allowed: gfx942, gfx950): no device", target));
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    s->total_mem = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(16) << 30;
    if (const char* f = std::getenv("MLA_HIP_TRACE"); f && *f) {
      s->trace_fd = ::open(f, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (s->trace_fd < 0) note(fmt::format("MLA_HIP_TRACE={}: cannot open ({}); not tracing", f, std::strerror(errno)));
    }
    return s;
  }();
  return *st;
}

// ---- Trace lines ---------------------------------------------------------------------------

class Line {
 public:
  explicit Line(std::string_view first) : s_(first) {}
  template <class T>
  Line& kv(std::string_view key, const T& value) {
    s_ += fmt::format(" {}={}", key, value);
    return *this;
  }
  Line& ptr(std::string_view key, const void* p) { return kv(key, fmt::format("{}", p)); }
  Line& word(std::string_view w) {
    s_ += ' ';
    s_ += w;
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

void write_line(State& st, std::string s) {
  if (st.trace_fd < 0) return;
  s += '\n';
  // One write per line on an O_APPEND descriptor: lines of concurrent writers do not interleave.
  const char* p = s.data();
  size_t n = s.size();
  while (n) {
    ssize_t w = ::write(st.trace_fd, p, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    p += w;
    n -= size_t(w);
  }
}

std::string stream_name(hipStream_t s) {
  if (s == nullptr) return "0";
  if (s == hipStreamPerThread) return "pt";
  return std::to_string(s->id);
}

const char* error_name(hipError_t e);
const char* error_text(hipError_t e);

// Every entry point: one lock, no exception escapes, failures remembered for hipGetLastError,
// one trace line when the call returns.
template <class F>
hipError_t api(const char* call, F&& body, bool needs_device = true) {
  std::lock_guard lk(g_mu);
  Line line(call);
  hipError_t e = hipSuccess;
  State* st = nullptr;
  try {
    st = &state();
    e = (needs_device && !st->ok) ? hipErrorNoDevice : body(*st, line);
  } catch (const std::bad_alloc&) {
    e = hipErrorOutOfMemory;
  } catch (const std::exception& x) {
    note(fmt::format("{}: internal error: {}", call, x.what()));
    e = hipErrorUnknown;
  }
  if (e != hipSuccess) t_last_error = e;
  if (st) write_line(*st, line.str() + " -> " + error_name(e));
  return e;
}

// ---- Memory --------------------------------------------------------------------------------

bool is_device(State& st, const void* p) { return p && st.dev->find(reinterpret_cast<uint64_t>(p), 1); }
bool in_one_allocation(State& st, const void* p, size_t n) { return st.dev->find(reinterpret_cast<uint64_t>(p), n); }

bool is_pinned(State& st, const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = st.pinned.upper_bound(a);
  if (it == st.pinned.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

// A (possibly strided) copy's pointers against its kind: resolves the direction, checks the
// device side of each pointer covers `dspan` / `sspan` bytes inside one allocation.
hipError_t check_copy(State& st, void* dst, size_t dspan, const void* src, size_t sspan, hipMemcpyKind kind, Dir& dir) {
  if (!dst || !src) return hipErrorInvalidValue;
  if (int(kind) < int(hipMemcpyHostToHost) || int(kind) > int(hipMemcpyDefault)) return hipErrorInvalidMemcpyDirection;
  const bool dd = is_device(st, dst), sd = is_device(st, src);
  switch (kind) {
    case hipMemcpyHostToHost:
      if (dd || sd) return hipErrorInvalidMemcpyDirection;
      dir = Dir::H2H;
      break;
    case hipMemcpyHostToDevice:
      if (sd) return hipErrorInvalidMemcpyDirection;
      if (!dd) return hipErrorInvalidDevicePointer;
      dir = Dir::H2D;
      break;
    case hipMemcpyDeviceToHost:
      if (dd) return hipErrorInvalidMemcpyDirection;
      if (!sd) return hipErrorInvalidDevicePointer;
      dir = Dir::D2H;
      break;
    case hipMemcpyDeviceToDevice:
      if (!dd || !sd) return hipErrorInvalidDevicePointer;
      dir = Dir::D2D;
      break;
    default:  // hipMemcpyDefault: from the pointers
      dir = dd ? (sd ? Dir::D2D : Dir::H2D) : (sd ? Dir::D2H : Dir::H2H);
      break;
  }
  if (dd && !in_one_allocation(st, dst, dspan)) return hipErrorInvalidValue;
  if (sd && !in_one_allocation(st, src, sspan)) return hipErrorInvalidValue;
  return hipSuccess;
}

// dst[i] = src[i] for n bytes in direction `dir` (checked before).
void copy_bytes(State& st, Dir dir, void* dst, const void* src, size_t n) {
  if (!n) return;
  const uint64_t d = reinterpret_cast<uint64_t>(dst), s = reinterpret_cast<uint64_t>(src);
  switch (dir) {
    case Dir::H2D: st.dev->write(d, src, n); break;
    case Dir::D2H: st.dev->read(s, dst, n); break;
    case Dir::D2D: {
      std::vector<uint8_t> tmp(n);
      st.dev->read(s, tmp.data(), n);
      st.dev->write(d, tmp.data(), n);
      break;
    }
    case Dir::H2H: std::memmove(dst, src, n); break;
  }
}

size_t span_2d(size_t pitch, size_t width, size_t height) { return pitch * (height - 1) + width; }

// ---- Launches ------------------------------------------------------------------------------

bool valid_function(State& st, hipFunction_t f) { return f && st.functions.count(f); }

// End of the kernel's explicit arguments (metadata; hidden_* arguments are the runtime's).
size_t explicit_args_end(const emu::Kernel& k) {
  size_t end = 0;
  for (const auto& a : k.args)
    if (a.value_kind.rfind("hidden_", 0) != 0) end = std::max<size_t>(end, size_t(a.offset) + a.size);
  return end;
}

hipError_t check_launch(State& st, const Op& op) {
  const emu::Kernel& k = op.co->kernel(op.function);
  const unsigned g[3] = {op.grid.x, op.grid.y, op.grid.z}, b[3] = {op.block.x, op.block.y, op.block.z};
  for (int i = 0; i < 3; ++i) {
    if (g[i] == 0 || b[i] == 0) return hipErrorInvalidValue;
    if (uint64_t(g[i]) * b[i] > UINT32_MAX) return hipErrorInvalidValue;  // grid in work-items overflows
  }
  if (uint64_t(b[0]) * b[1] * b[2] > 1024) return hipErrorInvalidValue;
  if (uint64_t(k.kd.group_segment_fixed_size) + op.shared > st.facts->lds_bytes) return hipErrorInvalidValue;
  return hipSuccess;
}

// Parses hipModuleLaunchKernel's argument channels into op.kernarg.
hipError_t kernarg_from(const emu::Kernel& k, void** kernel_params, void** extra, std::vector<uint8_t>& out) {
  if (kernel_params && extra) return hipErrorInvalidValue;
  if (kernel_params) {
    note("hipModuleLaunchKernel: kernelParams is not supported by the test device (pass the kernarg buffer "
         "through `extra`)");
    return hipErrorNotSupported;
  }
  const size_t need = explicit_args_end(k);
  if (!extra) {
    if (need) return hipErrorInvalidValue;  // the kernel takes arguments and none were given
    out.clear();
    return hipSuccess;
  }
  const void* buffer = nullptr;
  const size_t* size = nullptr;
  bool ended = false;
  for (int i = 0; i < 16 && !ended; i += 2) {  // a well-formed list has at most 3 keys
    void* key = extra[i];
    if (key == HIP_LAUNCH_PARAM_END) ended = true;
    else if (key == HIP_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
    else if (key == HIP_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<const size_t*>(extra[i + 1]);
    else return hipErrorInvalidValue;
  }
  if (!ended || !size || (!buffer && *size)) return hipErrorInvalidValue;
  if (*size < need || (k.kd.kernarg_size && *size > k.kd.kernarg_size)) {
    note(fmt::format("hipModuleLaunchKernel({}): kernarg buffer of {} bytes (the kernel's explicit arguments end "
                     "at {}, its kernarg segment is {} bytes)",
                     k.name, *size, need, k.kd.kernarg_size));
    return hipErrorInvalidValue;
  }
  out.assign(static_cast<const uint8_t*>(buffer), static_cast<const uint8_t*>(buffer) + *size);
  return hipSuccess;
}

// ---- Operations: check, describe, execute --------------------------------------------------

hipError_t check_op(State& st, Op& op) {
  switch (op.kind) {
    case Op::Copy: {
      if (op.bytes == 0) return hipSuccess;
      hipError_t e = check_copy(st, op.dst, op.bytes, op.src, op.bytes, op.memcpy_kind, op.dir);
      op.resolved = e == hipSuccess;
      return e;
    }
    case Op::Memset:
      if (op.bytes == 0) return hipSuccess;
      if (!op.dst || !is_device(st, op.dst) || !in_one_allocation(st, op.dst, op.bytes)) return hipErrorInvalidValue;
      return hipSuccess;
    case Op::Copy2D:
      if (op.width > op.dpitch || op.width > op.spitch) return hipErrorInvalidPitchValue;
      if (op.width == 0 || op.height == 0) return hipSuccess;
      if (op.height > 1 && (op.dpitch > SIZE_MAX / (op.height - 1) || op.spitch > SIZE_MAX / (op.height - 1)))
        return hipErrorInvalidValue;
      {
        hipError_t e = check_copy(st, op.dst, span_2d(op.dpitch, op.width, op.height), op.src,
                                  span_2d(op.spitch, op.width, op.height), op.memcpy_kind, op.dir);
        op.resolved = e == hipSuccess;
        return e;
      }
    case Op::Launch: return check_launch(st, op);
  }
  return hipErrorInvalidValue;
}

void describe(State& st, const Op& op, Line& l) {
  switch (op.kind) {
    case Op::Copy:
    case Op::Copy2D: {
      const bool twod = op.kind == Op::Copy2D;
      const size_t bytes = twod ? op.width * op.height : op.bytes;
      if (!op.resolved) l.kv("kind", int(op.memcpy_kind));  // not checked, or refused: as given
      else l.kv("dir", dir_name(op.dir));
      if (op.resolved && (op.dir == Dir::H2D || op.dir == Dir::D2H)) {
        const void* host = op.dir == Dir::H2D ? op.src : op.dst;
        const size_t span = !twod ? op.bytes
                            : op.height ? span_2d(op.dir == Dir::H2D ? op.spitch : op.dpitch, op.width, op.height)
                                        : 0;
        l.kv("host", is_pinned(st, host, span) ? "pinned" : "pageable");
      }
      l.kv("bytes", bytes);
      if (twod) l.kv("width", op.width).kv("height", op.height).kv("dpitch", op.dpitch).kv("spitch", op.spitch);
      l.ptr("dst", op.dst).ptr("src", op.src);
      break;
    }
    case Op::Memset: l.kv("bytes", op.bytes).kv("value", op.value).ptr("dst", op.dst); break;
    case Op::Launch:
      l.kv("function", op.function)
          .kv("grid", fmt::format("{}x{}x{}", op.grid.x, op.grid.y, op.grid.z))
          .kv("block", fmt::format("{}x{}x{}", op.block.x, op.block.y, op.block.z))
          .kv("shared", op.shared)
          .kv("kernarg", op.kernarg.size());
      break;
  }
}

hipError_t execute(State& st, const Op& op, Line& l) {
  switch (op.kind) {
    case Op::Copy: copy_bytes(st, op.dir, op.dst, op.src, op.bytes); return hipSuccess;
    case Op::Memset: {
      if (!op.bytes) return hipSuccess;
      emu::Allocation* a = st.dev->find(reinterpret_cast<uint64_t>(op.dst), op.bytes);
      std::memset(a->data.data() + (reinterpret_cast<uint64_t>(op.dst) - a->base), op.value, op.bytes);
      return hipSuccess;
    }
    case Op::Copy2D:
      for (size_t r = 0; r < op.height; ++r)
        copy_bytes(st, op.dir, static_cast<uint8_t*>(op.dst) + r * op.dpitch,
                   static_cast<const uint8_t*>(op.src) + r * op.spitch, op.width);
      return hipSuccess;
    case Op::Launch: {
      emu::DispatchOptions opts;  // the emulator's strict defaults (as runtime/emulator_backend.cpp)
      opts.dynamic_lds = op.shared;
      try {
        st.dev->dispatch(op.co, op.function, op.grid, op.block, op.kernarg, opts);
      } catch (const emu::Error& e) {
        l.kv("fault", e.rule);
        note(fmt::format("hipModuleLaunchKernel({}, grid {}x{}x{}, block {}x{}x{}): {}", op.function, op.grid.x,
                         op.grid.y, op.grid.z, op.block.x, op.block.y, op.block.z, e.what()));
        return e.rule == "out_of_bounds" ? hipErrorIllegalAddress : hipErrorLaunchFailure;
      }
      return hipSuccess;
    }
  }
  return hipErrorInvalidValue;
}

bool valid_stream(State& st, hipStream_t s) { return s == nullptr || s == hipStreamPerThread || st.streams.count(s); }
ihipStream_t* user_stream(hipStream_t s) { return s == nullptr || s == hipStreamPerThread ? nullptr : s; }

// An operation on `stream`: validated, then executed now or recorded by the stream's capture.
hipError_t enqueue(State& st, hipStream_t stream, Op op, Line& l) {
  l.kv("stream", stream_name(stream));
  if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
  ihipStream_t* s = user_stream(stream);
  if (s && s->capture == hipStreamCaptureStatusInvalidated) return hipErrorStreamCaptureInvalidated;
  hipError_t e = check_op(st, op);
  describe(st, op, l);
  if (e != hipSuccess) return e;
  if (s && s->capture == hipStreamCaptureStatusActive) {
    s->ops.push_back(std::move(op));
    l.word("captured");
    return hipSuccess;
  }
  return execute(st, op, l);
}

// ---- Capture rules -------------------------------------------------------------------------

bool capturing(const ihipStream_t& s) { return s.capture != hipStreamCaptureStatusNone; }

// hipMalloc and friends (clr's CHECK_STREAM_CAPTURE_SUPPORTED): global-mode captures, and
// thread-local ones begun by this thread, are invalidated and the call refused.
hipError_t check_capture_supported(State& st) {
  bool hit = false;
  for (auto& [h, s] : st.streams)
    if (capturing(*s) && (s->mode == hipStreamCaptureModeGlobal ||
                          (s->mode == hipStreamCaptureModeThreadLocal && s->capture_thread == std::this_thread::get_id()))) {
      s->capture = hipStreamCaptureStatusInvalidated;
      hit = true;
    }
  return hit ? hipErrorStreamCaptureUnsupported : hipSuccess;
}

// Every capture, whatever its mode, invalidated with `e` (synchronous copies / memsets, device
// synchronisation); hipSuccess when none is active.
hipError_t invalidate_all_captures(State& st, hipError_t e) {
  bool hit = false;
  for (auto& [h, s] : st.streams)
    if (capturing(*s)) {
      s->capture = hipStreamCaptureStatusInvalidated;
      hit = true;
    }
  return hit ? e : hipSuccess;
}

// ---- Properties ----------------------------------------------------------------------------

template <class P>
void fill_props(const State& st, P& p) {
  std::memset(&p, 0, sizeof p);
  const bool g942 = st.gfx == emu::Gfx::gfx942;
  std::snprintf(p.name, sizeof p.name, "MLA HIP test device (emulator %s)", std::string(st.facts->name).c_str());
  std::snprintf(p.gcnArchName, sizeof p.gcnArchName, "%s", std::string(st.facts->target_id).c_str());
  p.totalGlobalMem = st.total_mem;
  p.sharedMemPerBlock = st.facts->lds_bytes;
  p.maxSharedMemoryPerMultiProcessor = st.facts->lds_bytes;
  p.regsPerBlock = 512 * 64;
  p.warpSize = 64;
  p.maxThreadsPerBlock = 1024;
  for (int i = 0; i < 3; ++i) p.maxThreadsDim[i] = 1024, p.maxGridSize[i] = 0x7fffffff;
  p.clockRate = g942 ? 2100000 : 2400000;  // kHz, the product's peak engine clock
  p.memoryClockRate = g942 ? 1300000 : 2000000;
  p.memoryBusWidth = 8192;
  p.totalConstMem = 0x7fffffff;
  p.major = 9;
  p.minor = g942 ? 4 : 5;
  p.multiProcessorCount = st.facts->num_cus;
  p.l2CacheSize = 4 << 20;
  p.maxThreadsPerMultiProcessor = 2048;
  p.clockInstructionRate = 100000;
  p.concurrentKernels = 1;
  p.canMapHostMemory = 0;  // kernels cannot reach host memory here
  p.memPitch = 0x7fffffff;
  p.textureAlignment = 256;
  p.texturePitchAlignment = 256;
  p.arch.hasGlobalInt32Atomics = p.arch.hasSharedInt32Atomics = p.arch.hasFloatAtomicAdd = 1;
  p.arch.hasGlobalInt64Atomics = p.arch.hasSharedInt64Atomics = p.arch.hasDoubles = 1;
  p.arch.hasWarpVote = p.arch.hasWarpBallot = p.arch.hasWarpShuffle = p.arch.hasFunnelShift = 1;
  p.arch.has3dGrid = 1;
}

// ---- Code objects --------------------------------------------------------------------------

template <class T>
T rd(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}

// The size of an ELF64 image from its headers (hipModuleLoadData gets no size): the furthest
// byte any header, section or segment covers.
std::optional<size_t> elf_size(const uint8_t* p) {
  const uint64_t shoff = rd<uint64_t>(p, 0x28), phoff = rd<uint64_t>(p, 0x20);
  const uint16_t phentsize = rd<uint16_t>(p, 0x36), phnum = rd<uint16_t>(p, 0x38);
  const uint16_t shentsize = rd<uint16_t>(p, 0x3a), shnum = rd<uint16_t>(p, 0x3c);
  constexpr uint64_t kMax = uint64_t(1) << 30;
  if (shoff > kMax || phoff > kMax || (shnum && shentsize < 0x40) || (phnum && phentsize < 0x38)) return std::nullopt;
  uint64_t end = std::max<uint64_t>({0x40, shoff + uint64_t(shnum) * shentsize, phoff + uint64_t(phnum) * phentsize});
  for (unsigned i = 0; i < shnum; ++i) {
    const uint8_t* sh = p + shoff + uint64_t(i) * shentsize;
    const uint32_t type = rd<uint32_t>(sh, 4);
    const uint64_t off = rd<uint64_t>(sh, 0x18), size = rd<uint64_t>(sh, 0x20);
    if (type == 8 /* SHT_NOBITS */ || type == 0) continue;
    if (off > kMax || size > kMax) return std::nullopt;
    end = std::max(end, off + size);
  }
  for (unsigned i = 0; i < phnum; ++i) {
    const uint8_t* ph = p + phoff + uint64_t(i) * phentsize;
    const uint64_t off = rd<uint64_t>(ph, 8), size = rd<uint64_t>(ph, 0x20);
    if (off > kMax || size > kMax) return std::nullopt;
    end = std::max(end, off + size);
  }
  return end <= kMax ? std::optional<size_t>(end) : std::nullopt;
}

const char* capture_mode_name(hipStreamCaptureMode m) {
  switch (m) {
    case hipStreamCaptureModeGlobal: return "global";
    case hipStreamCaptureModeThreadLocal: return "thread_local";
    case hipStreamCaptureModeRelaxed: return "relaxed";
  }
  return "?";
}
const char* capture_status_name(hipStreamCaptureStatus s) {
  switch (s) {
    case hipStreamCaptureStatusNone: return "none";
    case hipStreamCaptureStatusActive: return "active";
    case hipStreamCaptureStatusInvalidated: return "invalidated";
  }
  return "?";
}

// ---- Error names ---------------------------------------------------------------------------

#define MLA_HIP_ERRORS(X)                                                                            \
  X(hipSuccess, "no error")                                                                          \
  X(hipErrorInvalidValue, "invalid argument")                                                        \
  X(hipErrorOutOfMemory, "out of memory")                                                            \
  X(hipErrorNotInitialized, "initialization error")                                                  \
  X(hipErrorDeinitialized, "driver shutting down")                                                   \
  X(hipErrorProfilerDisabled, "profiler disabled while using external profiling tool")               \
  X(hipErrorProfilerNotInitialized, "profiler is not initialized")                                   \
  X(hipErrorProfilerAlreadyStarted, "profiler already started")                                      \
  X(hipErrorProfilerAlreadyStopped, "profiler already stopped")                                      \
  X(hipErrorInvalidConfiguration, "invalid configuration argument")                                  \
  X(hipErrorInvalidPitchValue, "invalid pitch argument")                                             \
  X(hipErrorInvalidSymbol, "invalid device symbol")                                                  \
  X(hipErrorInvalidDevicePointer, "invalid device pointer")                                          \
  X(hipErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                             \
  X(hipErrorInsufficientDriver, "driver version is insufficient for runtime version")                \
  X(hipErrorMissingConfiguration, "__global__ function call is not configured")                      \
  X(hipErrorPriorLaunchFailure, "unspecified launch failure in prior launch")                        \
  X(hipErrorInvalidDeviceFunction, "invalid device function")                                        \
  X(hipErrorNoDevice, "no ROCm-capable device is detected")                                          \
  X(hipErrorInvalidDevice, "invalid device ordinal")                                                 \
  X(hipErrorInvalidImage, "device kernel image is invalid")                                          \
  X(hipErrorInvalidContext, "invalid device context")                                                \
  X(hipErrorContextAlreadyCurrent, "context is already current context")                            \
  X(hipErrorMapFailed, "mapping of buffer object failed")                                            \
  X(hipErrorUnmapFailed, "unmapping of buffer object failed")                                        \
  X(hipErrorArrayIsMapped, "array is mapped")                                                        \
  X(hipErrorAlreadyMapped, "resource already mapped")                                                \
  X(hipErrorNoBinaryForGpu, "no kernel image is available for execution on the device")              \
  X(hipErrorAlreadyAcquired, "resource already acquired")                                            \
  X(hipErrorNotMapped, "resource not mapped")                                                        \
  X(hipErrorNotMappedAsArray, "resource not mapped as array")                                        \
  X(hipErrorNotMappedAsPointer, "resource not mapped as pointer")                                    \
  X(hipErrorECCNotCorrectable, "uncorrectable ECC error encountered")                                \
  X(hipErrorUnsupportedLimit, "limit is not supported on this architecture")                         \
  X(hipErrorContextAlreadyInUse, "exclusive-thread device already in use by a different thread")     \
  X(hipErrorPeerAccessUnsupported, "peer access is not supported between these two devices")        \
  X(hipErrorInvalidKernelFile, "invalid kernel file")                                                \
  X(hipErrorInvalidGraphicsContext, "invalid OpenGL or DirectX context")                             \
  X(hipErrorInvalidSource, "device kernel image is invalid")                                         \
  X(hipErrorFileNotFound, "file not found")                                                          \
  X(hipErrorSharedObjectSymbolNotFound, "shared object symbol not found")                            \
  X(hipErrorSharedObjectInitFailed, "shared object initialization failed")                           \
  X(hipErrorOperatingSystem, "OS call failed or operation not supported on this OS")                 \
  X(hipErrorInvalidHandle, "invalid resource handle")                                                \
  X(hipErrorIllegalState, "the operation cannot be performed in the present state")                  \
  X(hipErrorNotFound, "named symbol not found")                                                      \
  X(hipErrorNotReady, "device not ready")                                                            \
  X(hipErrorIllegalAddress, "an illegal memory access was encountered")                              \
  X(hipErrorLaunchOutOfResources, "too many resources requested for launch")                         \
  X(hipErrorLaunchTimeOut, "the launch timed out and was terminated")                                \
  X(hipErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                              \
  X(hipErrorPeerAccessNotEnabled, "peer access has not been enabled")                                \
  X(hipErrorSetOnActiveProcess, "cannot set while device is active in this process")                 \
  X(hipErrorContextIsDestroyed, "context is destroyed")                                              \
  X(hipErrorAssert, "device-side assert triggered")                                                  \
  X(hipErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(hipErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")   \
  X(hipErrorLaunchFailure, "unspecified launch failure")                                             \
  X(hipErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch")                      \
  X(hipErrorNotSupported, "operation not supported")                                                 \
  X(hipErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")            \
  X(hipErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")     \
  X(hipErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences")   \
  X(hipErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")          \
  X(hipErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                             \
  X(hipErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")       \
  X(hipErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(hipErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
  X(hipErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
  X(hipErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
  X(hipErrorUnknown, "unknown error")                                                                \
  X(hipErrorRuntimeMemory, "runtime memory call returned error")                                     \
  X(hipErrorRuntimeOther, "runtime call other than memory returned error")

const char* error_name(hipError_t e) {
  switch (e) {
#define MLA_HIP_ERROR_NAME(name, text) \
  case name: return #name;
    MLA_HIP_ERRORS(MLA_HIP_ERROR_NAME)
#undef MLA_HIP_ERROR_NAME
    default: return "hipErrorUnknown";
  }
}

const char* error_text(hipError_t e) {
  switch (e) {
#define MLA_HIP_ERROR_TEXT(name, text) \
  case name: return text;
    MLA_HIP_ERRORS(MLA_HIP_ERROR_TEXT)
#undef MLA_HIP_ERROR_TEXT
    default: return "unknown error";
  }
}

}  // namespace

// ---- The exported HIP API ------------------------------------------------------------------

extern "C" {

const char* hipGetErrorName(hipError_t e) {
  std::lock_guard lk(g_mu);
  write_line(state(), fmt::format("hipGetErrorName error={} name={}", int(e), error_name(e)));
  return error_name(e);
}

const char* hipGetErrorString(hipError_t e) {
  std::lock_guard lk(g_mu);
  write_line(state(), fmt::format("hipGetErrorString error={} name={}", int(e), error_name(e)));
  return error_text(e);
}

hipError_t hipGetLastError(void) {
  std::lock_guard lk(g_mu);
  hipError_t e = std::exchange(t_last_error, hipSuccess);
  write_line(state(), fmt::format("hipGetLastError -> {}", error_name(e)));
  return e;
}

hipError_t hipGetDeviceCount(int* count) {
  return api(
      "hipGetDeviceCount",
      [&](State& st, Line& l) {
        if (!count) return hipErrorInvalidValue;
        *count = st.ok ? 1 : 0;
        l.kv("count", *count);
        return st.ok ? hipSuccess : hipErrorNoDevice;
      },
      false);
}

hipError_t hipSetDevice(int device) {
  return api("hipSetDevice", [&](State&, Line& l) {
    l.kv("device", device);
    return device == 0 ? hipSuccess : hipErrorInvalidDevice;
  });
}

hipError_t hipGetDevice(int* device) {
  return api("hipGetDevice", [&](State&, Line& l) {
    if (!device) return hipErrorInvalidValue;
    *device = 0;
    l.kv("device", 0);
    return hipSuccess;
  });
}

#if defined(HIP_VERSION_MAJOR) && HIP_VERSION_MAJOR >= 6
// ROCm 6+ headers: hipGetDeviceProperties is a macro for hipGetDevicePropertiesR0600 (below),
// and hipDeviceProp_t is the R0600 layout; the legacy (R0000) export is not provided.
#else
// The layout of the HIP headers compiled against (ROCm 5.x: R0000), what a ROCm 5 libamdhip64
// exports under this name.
hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int device) {
  return api("hipGetDeviceProperties", [&](State& st, Line& l) {
    l.kv("device", device);
    if (!prop) return hipErrorInvalidValue;
    if (device != 0) return hipErrorInvalidDevice;
    fill_props(st, *prop);
    prop->gcnArch = st.gfx == emu::Gfx::gfx942 ? 942 : 950;
    return hipSuccess;
  });
}
#endif

// Not declared by ROCm 5 headers: exported explicitly (the library builds with hidden visibility).
__attribute__((visibility("default"))) hipError_t hipGetDevicePropertiesR0600(MlaTestDevicePropR0600* prop,
                                                                               int device) {
  return api("hipGetDevicePropertiesR0600", [&](State& st, Line& l) {
    l.kv("device", device);
    if (!prop) return hipErrorInvalidValue;
    if (device != 0) return hipErrorInvalidDevice;
    fill_props(st, *prop);
    return hipSuccess;
  });
}

hipError_t hipDeviceSynchronize(void) {
  return api("hipDeviceSynchronize", [&](State& st, Line&) {
    return invalidate_all_captures(st, hipErrorStreamCaptureUnsupported);  // else: all work is done
  });
}

// ---- Memory ----

hipError_t hipMalloc(void** ptr, size_t size) {
  return api("hipMalloc", [&](State& st, Line& l) {
    l.kv("bytes", size);
    if (!ptr) return hipErrorInvalidValue;
    if (hipError_t e = check_capture_supported(st); e != hipSuccess) return e;
    if (size == 0) {
      *ptr = nullptr;
      return hipSuccess;
    }
    if (size > st.total_mem) return hipErrorOutOfMemory;
    uint64_t a = st.dev->alloc(size, 256, fmt::format("hipMalloc#{}", ++st.mallocs), kPoison);
    *ptr = reinterpret_cast<void*>(a);
    l.ptr("ptr", *ptr);
    return hipSuccess;
  });
}

hipError_t hipFree(void* ptr) {
  return api("hipFree", [&](State& st, Line& l) {
    l.ptr("ptr", ptr);
    if (hipError_t e = check_capture_supported(st); e != hipSuccess) return e;
    if (!ptr) return hipSuccess;
    const emu::Allocation* a = st.dev->find(reinterpret_cast<uint64_t>(ptr), 1);
    if (!a || a->base != reinterpret_cast<uint64_t>(ptr)) return hipErrorInvalidValue;
    st.dev->free(a->base);
    return hipSuccess;
  });
}

hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags) {
  return api("hipHostMalloc", [&](State& st, Line& l) {
    l.kv("bytes", size).kv("flags", fmt::format("0x{:x}", flags));
    constexpr unsigned kKnown = hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined |
                                hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent;
    if (!ptr || (flags & ~kKnown) ||
        ((flags & hipHostMallocCoherent) && (flags & hipHostMallocNonCoherent)))
      return hipErrorInvalidValue;
    if (hipError_t e = check_capture_supported(st); e != hipSuccess) return e;
    if (size == 0) {
      *ptr = nullptr;
      return hipSuccess;
    }
    if (size > st.total_mem) return hipErrorOutOfMemory;
    void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    if (!p) return hipErrorOutOfMemory;
    std::memset(p, kPoison, size);
    st.pinned[reinterpret_cast<uintptr_t>(p)] = size;
    *ptr = p;
    l.ptr("ptr", p);
    return hipSuccess;
  });
}

hipError_t hipHostFree(void* ptr) {
  return api("hipHostFree", [&](State& st, Line& l) {
    l.ptr("ptr", ptr);
    if (hipError_t e = check_capture_supported(st); e != hipSuccess) return e;
    if (!ptr) return hipSuccess;
    auto it = st.pinned.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == st.pinned.end()) return hipErrorInvalidValue;
    st.pinned.erase(it);
    std::free(ptr);
    return hipSuccess;
  });
}

hipError_t hipMemcpy(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind) {
  return api("hipMemcpy", [&](State& st, Line& l) {
    if (hipError_t e = invalidate_all_captures(st, hipErrorStreamCaptureImplicit); e != hipSuccess) {
      l.kv("stream", 0).kv("bytes", sizeBytes);
      return e;
    }
    Op op;
    op.kind = Op::Copy, op.call = "hipMemcpy", op.memcpy_kind = kind, op.dst = dst, op.src = src, op.bytes = sizeBytes;
    return enqueue(st, nullptr, std::move(op), l);
  });
}

hipError_t hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind, hipStream_t stream) {
  return api("hipMemcpyAsync", [&](State& st, Line& l) {
    Op op;
    op.kind = Op::Copy, op.call = "hipMemcpyAsync", op.memcpy_kind = kind, op.dst = dst, op.src = src,
    op.bytes = sizeBytes;
    return enqueue(st, stream, std::move(op), l);
  });
}

hipError_t hipMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                            hipMemcpyKind kind, hipStream_t stream) {
  return api("hipMemcpy2DAsync", [&](State& st, Line& l) {
    Op op;
    op.kind = Op::Copy2D, op.call = "hipMemcpy2DAsync", op.memcpy_kind = kind, op.dst = dst, op.src = src;
    op.dpitch = dpitch, op.spitch = spitch, op.width = width, op.height = height;
    return enqueue(st, stream, std::move(op), l);
  });
}

hipError_t hipMemset(void* dst, int value, size_t sizeBytes) {
  return api("hipMemset", [&](State& st, Line& l) {
    if (hipError_t e = invalidate_all_captures(st, hipErrorStreamCaptureImplicit); e != hipSuccess) {
      l.kv("stream", 0).kv("bytes", sizeBytes);
      return e;
    }
    Op op;
    op.kind = Op::Memset, op.call = "hipMemset", op.dst = dst, op.value = value, op.bytes = sizeBytes;
    return enqueue(st, nullptr, std::move(op), l);
  });
}

hipError_t hipMemsetAsync(void* dst, int value, size_t sizeBytes, hipStream_t stream) {
  return api("hipMemsetAsync", [&](State& st, Line& l) {
    Op op;
    op.kind = Op::Memset, op.call = "hipMemsetAsync", op.dst = dst, op.value = value, op.bytes = sizeBytes;
    return enqueue(st, stream, std::move(op), l);
  });
}

// ---- Streams ----

hipError_t hipStreamCreate(hipStream_t* stream) {
  return api("hipStreamCreate", [&](State& st, Line& l) {
    if (!stream) return hipErrorInvalidValue;
    auto s = std::make_unique<ihipStream_t>();
    s->id = st.next_stream++;
    *stream = s.get();
    st.streams.emplace(s.get(), std::move(s));
    l.kv("stream", (*stream)->id);
    return hipSuccess;
  });
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  return api("hipStreamDestroy", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream));
    if (!stream || stream == hipStreamPerThread) return hipErrorInvalidHandle;
    auto it = st.streams.find(stream);
    if (it == st.streams.end()) return hipErrorContextIsDestroyed;
    st.streams.erase(it);  // a capture in progress is dropped with it
    return hipSuccess;
  });
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  return api("hipStreamSynchronize", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream));
    if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
    if (ihipStream_t* s = user_stream(stream); s && capturing(*s)) return hipErrorStreamCaptureUnsupported;
    return hipSuccess;  // its work ran at enqueue time
  });
}

hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
  return api("hipStreamBeginCapture", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream)).kv("mode", capture_mode_name(mode));
    if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
    ihipStream_t* s = user_stream(stream);
    if (!s) return hipErrorStreamCaptureUnsupported;  // not on the null / per-thread stream
    if (int(mode) < int(hipStreamCaptureModeGlobal) || int(mode) > int(hipStreamCaptureModeRelaxed))
      return hipErrorInvalidValue;
    if (capturing(*s)) return hipErrorIllegalState;
    s->capture = hipStreamCaptureStatusActive;
    s->mode = mode;
    s->capture_thread = std::this_thread::get_id();
    s->ops.clear();
    return hipSuccess;
  });
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* pGraph) {
  return api("hipStreamEndCapture", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream));
    if (!pGraph) return hipErrorInvalidValue;
    if (!user_stream(stream)) return hipErrorIllegalState;
    if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
    ihipStream_t* s = stream;
    if (!capturing(*s)) return hipErrorIllegalState;
    if (s->mode != hipStreamCaptureModeRelaxed && s->capture_thread != std::this_thread::get_id())
      return hipErrorStreamCaptureWrongThread;
    const bool invalidated = s->capture == hipStreamCaptureStatusInvalidated;
    s->capture = hipStreamCaptureStatusNone;
    std::vector<Op> ops = std::exchange(s->ops, {});
    if (invalidated) {
      *pGraph = nullptr;
      return hipErrorStreamCaptureInvalidated;
    }
    auto g = std::make_unique<ihipGraph>();
    g->id = st.next_graph++;
    g->ops = std::move(ops);
    l.kv("graph", g->id).kv("ops", g->ops.size());
    *pGraph = g.get();
    st.graphs.emplace(g.get(), std::move(g));
    return hipSuccess;
  });
}

hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* pCaptureStatus) {
  return api("hipStreamIsCapturing", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream));
    if (!pCaptureStatus) return hipErrorInvalidValue;
    if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
    ihipStream_t* s = user_stream(stream);
    if (!s) {
      // The legacy stream synchronises with every blocking stream: asking it while one
      // captures is the implicit dependency HIP refuses.
      for (auto& [h, other] : st.streams)
        if (other->capture == hipStreamCaptureStatusActive) return hipErrorStreamCaptureImplicit;
      *pCaptureStatus = hipStreamCaptureStatusNone;
    } else {
      *pCaptureStatus = s->capture;
    }
    l.kv("status", capture_status_name(*pCaptureStatus));
    return hipSuccess;
  });
}

// ---- Graphs ----

hipError_t hipGraphInstantiate(hipGraphExec_t* pGraphExec, hipGraph_t graph, hipGraphNode_t* pErrorNode,
                               char* pLogBuffer, size_t bufferSize) {
  return api("hipGraphInstantiate", [&](State& st, Line& l) {
    l.kv("graph", graph && st.graphs.count(graph) ? std::to_string(graph->id) : fmt::format("{}", (void*)graph));
    if (!pGraphExec || !graph || !st.graphs.count(graph)) return hipErrorInvalidValue;
    if (pLogBuffer && bufferSize) pLogBuffer[0] = '\0';
    auto x = std::make_unique<hipGraphExec>();
    x->id = st.next_exec++;
    x->graph = graph->id;
    x->ops = graph->ops;  // a snapshot: later changes to the graph do not reach it
    l.kv("exec", x->id).kv("ops", x->ops.size());
    *pGraphExec = x.get();
    st.execs.emplace(x.get(), std::move(x));
    return hipSuccess;
  });
}

hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
  return api("hipGraphLaunch", [&](State& st, Line& l) {
    l.kv("stream", stream_name(stream));
    if (!graphExec || !st.execs.count(graphExec)) return hipErrorInvalidValue;
    l.kv("exec", graphExec->id).kv("graph", graphExec->graph).kv("ops", graphExec->ops.size());
    if (!valid_stream(st, stream)) return hipErrorContextIsDestroyed;
    ihipStream_t* s = user_stream(stream);
    if (s && s->capture == hipStreamCaptureStatusInvalidated) return hipErrorStreamCaptureInvalidated;
    if (s && s->capture == hipStreamCaptureStatusActive) {  // a graph launched into a capture
      s->ops.insert(s->ops.end(), graphExec->ops.begin(), graphExec->ops.end());
      l.word("captured");
      return hipSuccess;
    }
    for (Op op : graphExec->ops) {
      Line r("replay");
      r.word(op.call).kv("stream", stream_name(stream)).kv("exec", graphExec->id);
      hipError_t e = check_op(st, op);
      describe(st, op, r);
      if (e == hipSuccess) e = execute(st, op, r);
      write_line(st, r.str() + " -> " + error_name(e));
      if (e != hipSuccess) return e;
    }
    return hipSuccess;
  });
}

hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
  return api("hipGraphExecDestroy", [&](State& st, Line& l) {
    auto it = graphExec ? st.execs.find(graphExec) : st.execs.end();
    if (it == st.execs.end()) return hipErrorInvalidValue;
    l.kv("exec", graphExec->id);
    st.execs.erase(it);
    return hipSuccess;
  });
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
  return api("hipGraphDestroy", [&](State& st, Line& l) {
    if (!graph) return hipErrorInvalidValue;
    auto it = st.graphs.find(graph);
    if (it == st.graphs.end()) return hipErrorIllegalState;  // clr: an invalid (destroyed) graph
    l.kv("graph", graph->id);
    st.graphs.erase(it);
    return hipSuccess;
  });
}

// ---- Modules and launches ----

hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  return api("hipModuleLoadData", [&](State& st, Line& l) {
    if (!module || !image) return hipErrorInvalidValue;
    const auto* p = static_cast<const uint8_t*>(image);
    if (std::memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0) {
      note("hipModuleLoadData: clang offload bundles are not supported by the test device (pass a code object)");
      return hipErrorInvalidImage;
    }
    if (std::memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* little endian */)
      return hipErrorInvalidImage;
    if (rd<uint16_t>(p, 0x12) != 224 /* EM_AMDGPU */) return hipErrorInvalidImage;
    const uint32_t mach = rd<uint32_t>(p, 0x30) & 0xff;  // EF_AMDGPU_MACH
    const uint32_t want = st.gfx == emu::Gfx::gfx942 ? 0x4c : 0x4f;  // EF_AMDGPU_MACH_AMDGCN_GFX942 / GFX950
    l.kv("mach", fmt::format("0x{:x}", mach));
    if (mach != want) return hipErrorNoBinaryForGpu;
    std::optional<size_t> size = elf_size(p);
    if (!size) return hipErrorInvalidImage;
    auto m = std::make_unique<ihipModule_t>();
    try {
      m->co = emu::CodeObject::load_bytes(std::vector<uint8_t>(p, p + *size), "hipModuleLoadData image", st.gfx);
    } catch (const emu::Error& e) {
      note(fmt::format("hipModuleLoadData: {}", e.what()));
      return hipErrorInvalidImage;
    }
    m->id = st.next_module++;
    l.kv("module", m->id).kv("target", emu::gfx_name(st.gfx)).kv("bytes", *size).kv("kernels", m->co->kernels().size());
    *module = m.get();
    st.modules.emplace(m.get(), std::move(m));
    return hipSuccess;
  });
}

hipError_t hipModuleUnload(hipModule_t module) {
  return api("hipModuleUnload", [&](State& st, Line& l) {
    auto it = module ? st.modules.find(module) : st.modules.end();
    if (it == st.modules.end()) return hipErrorInvalidResourceHandle;
    l.kv("module", module->id);
    for (auto& [name, f] : module->functions) st.functions.erase(f.get());
    st.modules.erase(it);
    return hipSuccess;
  });
}

hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname) {
  return api("hipModuleGetFunction", [&](State& st, Line& l) {
    if (kname) l.kv("function", kname);
    if (!function || !kname) return hipErrorInvalidValue;
    if (!module || !st.modules.count(module)) return hipErrorInvalidResourceHandle;
    l.kv("module", module->id);
    auto it = module->functions.find(kname);
    if (it == module->functions.end()) {
      const auto& ks = module->co->kernels();
      auto k = std::find_if(ks.begin(), ks.end(), [&](const emu::Kernel& x) { return x.name == kname; });
      if (k == ks.end()) return hipErrorNotFound;
      auto f = std::make_unique<ihipModuleSymbol_t>();
      f->module = module;
      f->kernel = &*k;
      st.functions.insert(f.get());
      it = module->functions.emplace(kname, std::move(f)).first;
    }
    *function = it->second.get();
    return hipSuccess;
  });
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                 unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, hipStream_t stream, void** kernelParams, void** extra) {
  return api("hipModuleLaunchKernel", [&](State& st, Line& l) {
    if (!valid_function(st, f)) {
      l.kv("stream", stream_name(stream));
      return hipErrorInvalidResourceHandle;
    }
    Op op;
    op.kind = Op::Launch;
    op.call = "hipModuleLaunchKernel";
    op.co = f->module->co;
    op.function = f->kernel->name;
    op.grid = {gridDimX, gridDimY, gridDimZ};
    op.block = {blockDimX, blockDimY, blockDimZ};
    op.shared = sharedMemBytes;
    if (hipError_t e = kernarg_from(*f->kernel, kernelParams, extra, op.kernarg); e != hipSuccess) {
      l.kv("stream", stream_name(stream));
      describe(st, op, l);
      return e;
    }
    return enqueue(st, stream, std::move(op), l);
  });
}

}  // extern "C"
