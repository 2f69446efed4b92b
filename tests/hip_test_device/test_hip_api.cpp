// The HIP test device through the HIP API itself (linked against it, as a HIP program is):
// device query, allocations, copies both ways (pinned and pageable), memsets, 2D copies, a
// launch of the catalog's mla_merge_attn_states code object checked against the merge computed
// here in double precision, stream capture of copies + that launch replayed twice with
// different inputs, the errors HIP returns (bad pointers, out of bounds, capture rules, wrong
// target), and the trace file's lines.
//
//   test_hip_api <catalog dir> <trace file>   (MLA_HIP_TEST_DEVICE_TARGET: gfx942 or gfx950; the
//                                              catalog has mla_merge_attn_states for both)
//
// The device runs its target's mla_merge_attn_states and refuses the other target's with
// hipErrorNoBinaryForGpu. Exit 0 when every check passed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <hip/hip_runtime_api.h>

#include "abi/mla_abi.h"
#include "tests/hip_test_device/device_prop_r0600.h"

extern "C" hipError_t hipGetDevicePropertiesR0600(MlaTestDevicePropR0600* prop, int device);

namespace {

int g_failures = 0, g_checks = 0;
long g_calls = 0;  // HIP calls made: the trace must have one line for each

#define CHECK(cond)                                                                 \
  do {                                                                              \
    ++g_checks;                                                                     \
    if (!(cond)) {                                                                  \
      ++g_failures;                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                               \
  } while (0)

// A HIP call, counted, whose result must be `want`.
#define HIP_IS(want, call)                                                                              \
  do {                                                                                                  \
    ++g_calls;                                                                                          \
    ++g_checks;                                                                                         \
    hipError_t e_ = (call);                                                                             \
    if (e_ != (want)) {                                                                                 \
      ++g_failures;                                                                                     \
      std::fprintf(stderr, "%s:%d: %s returned %d, want %s\n", __FILE__, __LINE__, #call, int(e_), #want); \
    }                                                                                                   \
  } while (0)
#define HIP_OK(call) HIP_IS(hipSuccess, call)

template <class T>
T* dev_ptr(void* p, size_t byte_offset = 0) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(p) + byte_offset);
}

uint16_t bf16_bits(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
double bf16_value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

bool has_line(const std::vector<std::string>& lines, std::initializer_list<const char*> parts) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
    return std::all_of(parts.begin(), parts.end(), [&](const char* p) { return l.find(p) != std::string::npos; });
  });
}
size_t count_lines(const std::vector<std::string>& lines, const std::string& prefix, const char* also = "") {
  return size_t(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
    return l.rfind(prefix, 0) == 0 && l.find(also) != std::string::npos;
  }));
}

// One merge_attn_states problem: inputs and the merge computed here in double precision.
constexpr uint32_t kRows = 37;  // 37 (token, head) rows of 512 bf16
struct MergeData {
  std::vector<uint16_t> po, so;  // [rows, 512]
  std::vector<float> pl, sl;     // [rows]
  std::vector<double> want_o, want_lse;
};
MergeData make_merge(std::mt19937& rng) {
  MergeData d;
  std::normal_distribution<float> n01;
  std::uniform_real_distribution<float> lse_d(-6.f, 6.f);
  d.po.resize(kRows * 512), d.so.resize(kRows * 512), d.pl.resize(kRows), d.sl.resize(kRows);
  for (auto& v : d.po) v = bf16_bits(n01(rng));
  for (auto& v : d.so) v = bf16_bits(n01(rng));
  for (uint32_t r = 0; r < kRows; ++r) d.pl[r] = lse_d(rng), d.sl[r] = lse_d(rng);
  d.pl[4] = -INFINITY;  // only the suffix saw tokens
  for (uint32_t r = 0; r < kRows; ++r) {
    const double a = d.pl[r], s = d.sl[r], m = std::max(a, s);
    const double wa = std::exp(a - m), ws = std::exp(s - m);
    for (int c = 0; c < 512; ++c) {
      const size_t i = size_t(r) * 512 + size_t(c);
      d.want_o.push_back((wa * bf16_value(d.po[i]) + ws * bf16_value(d.so[i])) / (wa + ws));
    }
    d.want_lse.push_back(m + std::log(wa + ws));
  }
  return d;
}
// Output against the merge: each element within bf16 rounding (2^-8 relative) plus f32 error.
int merge_mismatches(const MergeData& d, const uint16_t* o, const float* lse) {
  int bad = 0;
  for (size_t i = 0; i < d.want_o.size(); ++i) {
    const double want = d.want_o[i], got = bf16_value(o[i]);
    if (!(std::abs(got - want) <= std::ldexp(std::abs(want), -8) + 1e-6)) ++bad;
  }
  for (uint32_t r = 0; r < kRows; ++r)
    if (!(std::abs(lse[r] - d.want_lse[r]) <= 1e-5 * std::max(1.0, std::abs(d.want_lse[r])))) ++bad;
  return bad;
}

// Device buffers of one merge launch and its kernarg bytes (abi::merge_args).
struct MergeBuffers {
  void *po = nullptr, *so = nullptr, *pl = nullptr, *sl = nullptr, *o = nullptr, *ol = nullptr;
  std::vector<uint8_t> kernarg() const {
    namespace A = mla::abi::merge_args;
    std::vector<uint8_t> k(A::size, 0);
    auto put = [&](uint32_t off, const void* p) { std::memcpy(k.data() + off, &p, 8); };
    put(A::output, o), put(A::prefix_output, po), put(A::prefix_lse, pl);
    put(A::suffix_output, so), put(A::suffix_lse, sl), put(A::output_lse, ol);
    const uint32_t rows = kRows;
    std::memcpy(k.data() + A::rows, &rows, 4);
    return k;
  }
};

hipError_t launch(hipFunction_t f, unsigned grid, unsigned block, std::vector<uint8_t>& args, hipStream_t stream) {
  size_t size = args.size();
  void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, args.data(), HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   HIP_LAUNCH_PARAM_END};
  return hipModuleLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, nullptr, extra);
}

void test_device(const std::string& gfx) {
  int n = -1;
  HIP_OK(hipGetDeviceCount(&n));
  CHECK(n == 1);
  HIP_IS(hipErrorInvalidValue, hipGetDeviceCount(nullptr));
  HIP_OK(hipSetDevice(0));
  HIP_IS(hipErrorInvalidDevice, hipSetDevice(1));
  int d = -1;
  HIP_OK(hipGetDevice(&d));
  CHECK(d == 0);
  const std::string name = "MLA HIP test device (emulator " + gfx + ")";
  const std::string arch = gfx + ":sramecc+:xnack-";
  const int cus = gfx == "gfx942" ? 304 : 256;  // MI300X / MI355X
  MlaTestDevicePropR0600 p6;
  std::memset(&p6, 0x5a, sizeof p6);
  HIP_OK(hipGetDevicePropertiesR0600(&p6, 0));
  CHECK(name == p6.name);
  CHECK(arch == p6.gcnArchName);
  CHECK(p6.multiProcessorCount == cus);
  CHECK(p6.warpSize == 64);
  CHECK(p6.totalGlobalMem > 0);
  hipDeviceProp_t p5;  // the layout of the headers compiled against (ROCm 5.2 here)
  std::memset(&p5, 0x5a, sizeof p5);
  HIP_OK(hipGetDeviceProperties(&p5, 0));
  CHECK(name == p5.name);
  CHECK(arch == p5.gcnArchName);
  CHECK(p5.multiProcessorCount == cus);
  HIP_IS(hipErrorInvalidDevice, hipGetDevicePropertiesR0600(&p6, 1));
  HIP_IS(hipErrorInvalidValue, hipGetDevicePropertiesR0600(nullptr, 0));
}

void test_memory(std::mt19937& rng) {
  const size_t N = 4096;
  void *a = nullptr, *b = nullptr;
  HIP_OK(hipMalloc(&a, N));
  HIP_OK(hipMalloc(&b, N));
  CHECK(a && b && a != b);
  std::vector<uint8_t> host(N), back(N), want(N);
  // Fresh device memory is not zeroed (documented fill 0xA5).
  HIP_OK(hipMemcpy(back.data(), a, N, hipMemcpyDeviceToHost));
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 0xA5; }));

  for (auto& v : host) v = uint8_t(rng());
  HIP_OK(hipMemcpy(a, host.data(), N, hipMemcpyHostToDevice));
  std::fill(back.begin(), back.end(), 0);
  HIP_OK(hipMemcpy(back.data(), a, N, hipMemcpyDeviceToHost));
  CHECK(back == host);

  // memset inside, then D2D with hipMemcpyDefault, then a 2D copy: against a host model.
  want = host;
  std::fill(want.begin() + 100, want.begin() + 300, uint8_t(0x3c));
  HIP_OK(hipMemset(dev_ptr<uint8_t>(a, 100), 0x3c, 200));
  HIP_OK(hipMemcpy(b, a, N, hipMemcpyDefault));
  HIP_OK(hipMemcpy(back.data(), b, N, hipMemcpyDefault));
  CHECK(back == want);
  hipStream_t s = nullptr;
  HIP_OK(hipStreamCreate(&s));
  HIP_OK(hipMemsetAsync(b, 0, N, s));
  // 2D: 7 rows of 33 bytes, source pitch 100 (from a), destination pitch 64 (into b).
  HIP_OK(hipMemcpy2DAsync(dev_ptr<uint8_t>(b, 5), 64, dev_ptr<uint8_t>(a, 11), 100, 33, 7, hipMemcpyDeviceToDevice, s));
  HIP_OK(hipStreamSynchronize(s));
  std::vector<uint8_t> want2(N, 0);
  for (int r = 0; r < 7; ++r) std::memcpy(&want2[5 + r * 64], &want[11 + r * 100], 33);
  HIP_OK(hipMemcpyAsync(back.data(), b, N, hipMemcpyDeviceToHost, s));
  HIP_OK(hipStreamSynchronize(s));
  CHECK(back == want2);

  // Pinned host memory both ways.
  uint8_t* pinned = nullptr;
  HIP_OK(hipHostMalloc(reinterpret_cast<void**>(&pinned), N, 0));
  CHECK(pinned != nullptr);
  for (size_t i = 0; i < N; ++i) pinned[i] = uint8_t(rng());
  std::vector<uint8_t> pinned_copy(pinned, pinned + N);
  HIP_OK(hipMemcpyAsync(a, pinned, N, hipMemcpyHostToDevice, s));
  std::memset(pinned, 0, N);
  HIP_OK(hipMemcpyAsync(pinned, a, N, hipMemcpyDeviceToHost, s));
  HIP_OK(hipStreamSynchronize(s));
  CHECK(std::equal(pinned, pinned + N, pinned_copy.begin()));

  // Errors: each with the HIP code a real runtime gives, none touching memory.
  HIP_IS(hipErrorInvalidValue, hipMalloc(nullptr, 16));
  HIP_IS(hipErrorInvalidValue, hipMemcpy(dev_ptr<uint8_t>(a, N - 8), host.data(), 16, hipMemcpyHostToDevice));  // past the end
  HIP_IS(hipErrorInvalidValue, hipMemcpy(host.data(), dev_ptr<uint8_t>(b, 1), N, hipMemcpyDeviceToHost));
  HIP_IS(hipErrorInvalidDevicePointer, hipMemcpy(back.data(), host.data(), 16, hipMemcpyHostToDevice));  // dst is host
  HIP_IS(hipErrorInvalidDevicePointer, hipMemcpy(back.data(), host.data(), 16, hipMemcpyDeviceToHost));  // src is host
  HIP_IS(hipErrorInvalidMemcpyDirection, hipMemcpy(a, b, 16, hipMemcpyHostToDevice));                 // src is device
  HIP_IS(hipErrorInvalidMemcpyDirection, hipMemcpy(a, host.data(), 16, hipMemcpyKind(7)));
  HIP_IS(hipErrorInvalidValue, hipMemcpy(nullptr, host.data(), 16, hipMemcpyHostToDevice));
  HIP_IS(hipErrorInvalidValue, hipMemset(dev_ptr<uint8_t>(a, 1), 0, N));  // past the end
  HIP_IS(hipErrorInvalidValue, hipMemset(host.data(), 0, 16));             // not device memory
  HIP_IS(hipErrorInvalidPitchValue, hipMemcpy2DAsync(b, 16, a, 100, 33, 2, hipMemcpyDeviceToDevice, s));
  HIP_IS(hipErrorInvalidValue, hipMemcpy2DAsync(b, 64, a, 100, 33, 64, hipMemcpyDeviceToDevice, s));  // rows past a's end
  HIP_IS(hipErrorInvalidValue, hipFree(dev_ptr<uint8_t>(a, 16)));  // not an allocation's base
  HIP_IS(hipErrorInvalidValue, hipHostFree(host.data()));          // not from hipHostMalloc
  // Nothing above changed a: still the pinned bytes.
  HIP_OK(hipMemcpy(back.data(), a, N, hipMemcpyDeviceToHost));
  CHECK(std::equal(back.begin(), back.end(), pinned_copy.begin()));
  HIP_OK(hipFree(b));
  HIP_IS(hipErrorInvalidValue, hipFree(b));                                                       // twice
  HIP_IS(hipErrorInvalidDevicePointer, hipMemcpy(b, host.data(), 16, hipMemcpyHostToDevice));  // freed
  HIP_IS(hipErrorInvalidValue, hipMemsetAsync(b, 0, 16, s));
  // hipGetLastError: the last failure, then cleared.
  ++g_calls;
  CHECK(hipGetLastError() == hipErrorInvalidValue);
  ++g_calls;
  CHECK(hipGetLastError() == hipSuccess);
  ++g_calls;
  CHECK(std::string(hipGetErrorName(hipErrorInvalidDevicePointer)) == "hipErrorInvalidDevicePointer");
  ++g_calls;
  CHECK(std::string(hipGetErrorString(hipErrorNoBinaryForGpu)).size() > 10);

  HIP_OK(hipStreamDestroy(s));
  HIP_IS(hipErrorContextIsDestroyed, hipMemcpyAsync(a, host.data(), 16, hipMemcpyHostToDevice, s));
  HIP_IS(hipErrorInvalidHandle, hipStreamDestroy(nullptr));
  HIP_OK(hipFree(a));
  HIP_OK(hipHostFree(pinned));
  HIP_OK(hipFree(nullptr));
  HIP_OK(hipMemcpy(nullptr, nullptr, 0, hipMemcpyHostToDevice));  // nothing to copy
}

struct Merge {
  hipModule_t module = nullptr;
  hipFunction_t fn = nullptr;
};

// The merge kernel on the null stream, against the host merge; then the ways a launch fails.
void test_launch(const std::vector<uint8_t>& co, Merge& m, std::mt19937& rng) {
  HIP_IS(hipErrorInvalidValue, hipModuleLoadData(nullptr, co.data()));
  std::vector<uint8_t> junk(256, 0x42);
  HIP_IS(hipErrorInvalidImage, hipModuleLoadData(&m.module, junk.data()));
  HIP_OK(hipModuleLoadData(&m.module, co.data()));
  HIP_IS(hipErrorNotFound, hipModuleGetFunction(&m.fn, m.module, "no_such_kernel"));
  HIP_OK(hipModuleGetFunction(&m.fn, m.module, "mla_merge_attn_states"));

  MergeData d = make_merge(rng);
  MergeBuffers b;
  HIP_OK(hipMalloc(&b.po, d.po.size() * 2));
  HIP_OK(hipMalloc(&b.so, d.so.size() * 2));
  HIP_OK(hipMalloc(&b.pl, kRows * 4));
  HIP_OK(hipMalloc(&b.sl, kRows * 4));
  HIP_OK(hipMalloc(&b.o, kRows * 512 * 2));
  HIP_OK(hipMalloc(&b.ol, kRows * 4));
  HIP_OK(hipMemcpy(b.po, d.po.data(), d.po.size() * 2, hipMemcpyHostToDevice));
  HIP_OK(hipMemcpy(b.so, d.so.data(), d.so.size() * 2, hipMemcpyHostToDevice));
  HIP_OK(hipMemcpy(b.pl, d.pl.data(), kRows * 4, hipMemcpyHostToDevice));
  HIP_OK(hipMemcpy(b.sl, d.sl.data(), kRows * 4, hipMemcpyHostToDevice));
  HIP_OK(hipMemset(b.o, 0xff, kRows * 512 * 2));  // poison: an unwritten element is a NaN
  HIP_OK(hipMemset(b.ol, 0xff, kRows * 4));
  std::vector<uint8_t> args = b.kernarg();
  HIP_OK(launch(m.fn, kRows, 64, args, nullptr));
  std::vector<uint16_t> o(kRows * 512);
  std::vector<float> lse(kRows);
  HIP_OK(hipMemcpy(o.data(), b.o, o.size() * 2, hipMemcpyDeviceToHost));
  HIP_OK(hipMemcpy(lse.data(), b.ol, kRows * 4, hipMemcpyDeviceToHost));
  CHECK(merge_mismatches(d, o.data(), lse.data()) == 0);

  // Launch errors.
  size_t small = 8;
  void* extra_small[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, args.data(), HIP_LAUNCH_PARAM_BUFFER_SIZE, &small,
                         HIP_LAUNCH_PARAM_END};
  HIP_IS(hipErrorInvalidValue, hipModuleLaunchKernel(m.fn, kRows, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra_small));
  void* params[] = {args.data()};
  HIP_IS(hipErrorNotSupported, hipModuleLaunchKernel(m.fn, kRows, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr));
  HIP_IS(hipErrorInvalidValue, hipModuleLaunchKernel(m.fn, kRows, 1, 1, 64, 1, 1, 0, nullptr, nullptr, nullptr));
  HIP_IS(hipErrorInvalidValue, launch(m.fn, 0, 64, args, nullptr));     // empty grid
  HIP_IS(hipErrorInvalidValue, launch(m.fn, kRows, 2048, args, nullptr));  // block too large
  HIP_IS(hipErrorInvalidResourceHandle, launch(nullptr, kRows, 64, args, nullptr));
  // One row more than the buffers hold: the kernel reads past prefix_output's end.
  HIP_IS(hipErrorIllegalAddress, launch(m.fn, kRows + 1, 64, args, nullptr));

  for (void* p : {b.po, b.so, b.pl, b.sl, b.o, b.ol}) HIP_OK(hipFree(p));
}

// Capture: pinned uploads + memset + launch + pinned download recorded, nothing run; the graph
// launched twice with different host inputs (read at replay) and a clobbered kernarg buffer
// (copied at capture); then the capture rules.
void test_capture(Merge& m, std::mt19937& rng) {
  MergeBuffers b;
  HIP_OK(hipMalloc(&b.po, kRows * 512 * 2));
  HIP_OK(hipMalloc(&b.so, kRows * 512 * 2));
  HIP_OK(hipMalloc(&b.pl, kRows * 4));
  HIP_OK(hipMalloc(&b.sl, kRows * 4));
  HIP_OK(hipMalloc(&b.o, kRows * 512 * 2));
  HIP_OK(hipMalloc(&b.ol, kRows * 4));
  const size_t ob = kRows * 512 * 2, lb = kRows * 4;
  uint8_t* in = nullptr;   // pinned: po | so | pl | sl
  uint8_t* out = nullptr;  // pinned: o | lse
  HIP_OK(hipHostMalloc(reinterpret_cast<void**>(&in), 2 * ob + 2 * lb, 0));
  HIP_OK(hipHostMalloc(reinterpret_cast<void**>(&out), ob + lb, 0));
  HIP_OK(hipMemset(b.o, 0x11, ob));  // what the output holds if the capture ran nothing

  hipStream_t s = nullptr;
  HIP_OK(hipStreamCreate(&s));
  hipStreamCaptureStatus status = hipStreamCaptureStatusInvalidated;
  HIP_OK(hipStreamIsCapturing(s, &status));
  CHECK(status == hipStreamCaptureStatusNone);
  HIP_OK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
  HIP_OK(hipStreamIsCapturing(s, &status));
  CHECK(status == hipStreamCaptureStatusActive);
  HIP_OK(hipMemcpyAsync(b.po, in, ob, hipMemcpyHostToDevice, s));
  HIP_OK(hipMemcpyAsync(b.so, in + ob, ob, hipMemcpyHostToDevice, s));
  HIP_OK(hipMemcpyAsync(b.pl, in + 2 * ob, lb, hipMemcpyHostToDevice, s));
  HIP_OK(hipMemcpyAsync(b.sl, in + 2 * ob + lb, lb, hipMemcpyHostToDevice, s));
  HIP_OK(hipMemsetAsync(b.ol, 0xff, lb, s));
  std::vector<uint8_t> args = b.kernarg();
  HIP_OK(launch(m.fn, kRows, 64, args, s));
  HIP_OK(hipMemcpyAsync(out, b.o, ob, hipMemcpyDeviceToHost, s));
  HIP_OK(hipMemcpyAsync(out + ob, b.ol, lb, hipMemcpyDeviceToHost, s));
  HIP_IS(hipErrorStreamCaptureUnsupported, hipStreamSynchronize(s));  // the capture goes on
  hipGraph_t g = nullptr;
  HIP_OK(hipStreamEndCapture(s, &g));
  CHECK(g != nullptr);
  hipGraphExec_t x = nullptr;
  HIP_OK(hipGraphInstantiate(&x, g, nullptr, nullptr, 0));
  HIP_OK(hipGraphDestroy(g));  // the executable graph is independent of it
  std::vector<uint16_t> o(kRows * 512);
  HIP_OK(hipMemcpy(o.data(), b.o, ob, hipMemcpyDeviceToHost));
  CHECK(std::all_of(o.begin(), o.end(), [](uint16_t v) { return v == 0x1111; }));  // nothing ran

  std::fill(args.begin(), args.end(), uint8_t(0));  // the capture holds its own copy
  std::vector<uint16_t> first;
  for (int round = 0; round < 2; ++round) {
    MergeData d = make_merge(rng);
    std::memcpy(in, d.po.data(), ob);
    std::memcpy(in + ob, d.so.data(), ob);
    std::memcpy(in + 2 * ob, d.pl.data(), lb);
    std::memcpy(in + 2 * ob + lb, d.sl.data(), lb);
    std::memset(out, 0xff, ob + lb);
    HIP_OK(hipGraphLaunch(x, s));
    HIP_OK(hipStreamSynchronize(s));
    const auto* oo = reinterpret_cast<const uint16_t*>(out);
    float lse[kRows];
    std::memcpy(lse, out + ob, lb);
    CHECK(merge_mismatches(d, oo, lse) == 0);
    if (round == 0) first.assign(oo, oo + kRows * 512);
    else CHECK(!std::equal(first.begin(), first.end(), oo));  // the second inputs were used
  }
  HIP_OK(hipGraphExecDestroy(x));
  HIP_IS(hipErrorInvalidValue, hipGraphExecDestroy(x));
  HIP_IS(hipErrorInvalidValue, hipGraphLaunch(x, s));

  // Capture rules.
  HIP_IS(hipErrorStreamCaptureUnsupported, hipStreamBeginCapture(nullptr, hipStreamCaptureModeGlobal));
  HIP_IS(hipErrorIllegalState, hipStreamEndCapture(s, &g));  // not capturing
  // hipMalloc invalidates a global capture; the rest of it is refused, and so is its end.
  HIP_OK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
  HIP_IS(hipErrorIllegalState, hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
  HIP_OK(hipMemsetAsync(b.o, 0, ob, s));
  void* extra = nullptr;
  HIP_IS(hipErrorStreamCaptureUnsupported, hipMalloc(&extra, 64));
  HIP_OK(hipStreamIsCapturing(s, &status));
  CHECK(status == hipStreamCaptureStatusInvalidated);
  HIP_IS(hipErrorStreamCaptureInvalidated, hipMemsetAsync(b.o, 0, ob, s));
  g = reinterpret_cast<hipGraph_t>(&status);
  HIP_IS(hipErrorStreamCaptureInvalidated, hipStreamEndCapture(s, &g));
  CHECK(g == nullptr);
  // A synchronous copy while capturing: the implicit dependency HIP refuses.
  HIP_OK(hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed));
  HIP_IS(hipErrorStreamCaptureImplicit, hipMemcpy(o.data(), b.o, ob, hipMemcpyDeviceToHost));
  HIP_IS(hipErrorStreamCaptureInvalidated, hipStreamEndCapture(s, &g));
  // hipDeviceSynchronize while capturing.
  HIP_OK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
  HIP_IS(hipErrorStreamCaptureUnsupported, hipDeviceSynchronize());
  HIP_IS(hipErrorStreamCaptureInvalidated, hipStreamEndCapture(s, &g));
  // Memory freed between capture and replay: the replay refuses the operation.
  void* tmp = nullptr;
  HIP_OK(hipMalloc(&tmp, 256));
  HIP_OK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
  HIP_OK(hipMemsetAsync(tmp, 0, 256, s));
  HIP_OK(hipStreamEndCapture(s, &g));
  HIP_OK(hipGraphInstantiate(&x, g, nullptr, nullptr, 0));
  HIP_OK(hipFree(tmp));
  HIP_IS(hipErrorInvalidValue, hipGraphLaunch(x, s));
  HIP_OK(hipGraphExecDestroy(x));
  HIP_OK(hipGraphDestroy(g));
  HIP_IS(hipErrorIllegalState, hipGraphDestroy(g));

  HIP_OK(hipStreamDestroy(s));
  for (void* p : {b.po, b.so, b.pl, b.sl, b.o, b.ol}) HIP_OK(hipFree(p));
  HIP_OK(hipHostFree(in));
  HIP_OK(hipHostFree(out));
}

void test_trace(const std::vector<std::string>& lines, const std::string& gfx) {
  const std::string mach = gfx == "gfx942" ? "0x4c" : "0x4f", other_mach = gfx == "gfx942" ? "0x4f" : "0x4c";
  // One line per call, plus one per replayed operation.
  CHECK(long(lines.size() - count_lines(lines, "replay ")) == g_calls);
  CHECK(has_line(lines, {"hipGetDevicePropertiesR0600 device=0 -> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpy stream=0 dir=H2D host=pageable bytes=4096 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpy stream=0 dir=D2H host=pageable bytes=4096 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpy stream=0 dir=D2D bytes=4096 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpyAsync stream=1 dir=H2D host=pinned bytes=4096 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpyAsync stream=1 dir=D2H host=pinned bytes=4096 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpy2DAsync stream=1 dir=D2D bytes=231 width=33 height=7 dpitch=64 spitch=100 "}));
  CHECK(has_line(lines, {"hipMemset stream=0 bytes=200 value=60 ", "-> hipSuccess"}));
  CHECK(has_line(lines, {"hipMemcpy stream=0 kind=1 bytes=16 ", "-> hipErrorInvalidDevicePointer"}));
  CHECK(has_line(lines, {("hipModuleLoadData mach=" + mach + " module=1 target=" + gfx + " ").c_str(), "-> hipSuccess"}));
  CHECK(has_line(lines, {("hipModuleLoadData mach=" + other_mach + " -> hipErrorNoBinaryForGpu").c_str()}));
  CHECK(has_line(lines, {"hipModuleLaunchKernel stream=0 function=mla_merge_attn_states grid=37x1x1 block=64x1x1 "
                         "shared=0 kernarg=56 -> hipSuccess"}));
  CHECK(has_line(lines, {"hipModuleLaunchKernel stream=0 function=mla_merge_attn_states grid=38x1x1 ",
                         "fault=out_of_bounds -> hipErrorIllegalAddress"}));
  // The capture: recorded, then replayed twice.
  CHECK(count_lines(lines, "hipMemcpyAsync stream=2 dir=H2D host=pinned ", "captured -> hipSuccess") == 4);
  CHECK(count_lines(lines, "hipModuleLaunchKernel stream=2 function=mla_merge_attn_states grid=37x1x1 ",
                    "captured -> hipSuccess") == 1);
  CHECK(count_lines(lines, "hipMemcpyAsync stream=2 dir=D2H host=pinned ", "captured -> hipSuccess") == 2);
  CHECK(has_line(lines, {"hipStreamEndCapture stream=2 graph=1 ops=8 -> hipSuccess"}));
  CHECK(has_line(lines, {"hipGraphInstantiate graph=1 exec=1 ops=8 -> hipSuccess"}));
  CHECK(count_lines(lines, "replay hipModuleLaunchKernel stream=2 exec=1 function=mla_merge_attn_states ",
                    "-> hipSuccess") == 2);
  CHECK(count_lines(lines, "replay hipMemcpyAsync stream=2 exec=1 dir=H2D host=pinned ", "-> hipSuccess") == 8);
  CHECK(count_lines(lines, "hipGraphLaunch stream=2 exec=1 graph=1 ops=8 -> hipSuccess") == 2);
  CHECK(count_lines(lines, "hipMalloc bytes=64 -> hipErrorStreamCaptureUnsupported") == 1);
  CHECK(has_line(lines, {"hipMemcpy stream=0 bytes=", "-> hipErrorStreamCaptureImplicit"}));
  CHECK(has_line(lines, {"replay hipMemsetAsync stream=2 exec=2 bytes=256 ", "-> hipErrorInvalidValue"}));
  // Every replay line follows its capture: none before the first hipGraphLaunch's capture ended.
  auto first_replay = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("replay ", 0) == 0; });
  auto end_capture = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("hipStreamEndCapture", 0) == 0; });
  CHECK(end_capture < first_replay);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <catalog dir> <trace file>\n", argv[0]);
    return 2;
  }
  const std::string catalog = argv[1], trace = argv[2];
  std::remove(trace.c_str());
  setenv("MLA_HIP_TRACE", trace.c_str(), 1);  // before the first HIP call
  const char* t = std::getenv("MLA_HIP_TEST_DEVICE_TARGET");
  const std::string gfx = t && *t ? t : "gfx942";
  std::mt19937 rng(20240531);

  // The device's own mla_merge_attn_states, and the other target's (hipErrorNoBinaryForGpu).
  const std::string other = gfx == "gfx942" ? "gfx950" : "gfx942";
  const std::vector<uint8_t> co = read_file(catalog + "/hsa/" + gfx + "/mla/mla_merge_attn_states.co");
  const std::vector<uint8_t> co_other = read_file(catalog + "/hsa/" + other + "/mla/mla_merge_attn_states.co");
  if (co.size() < 64 || co_other.size() < 64) {
    std::fprintf(stderr, "cannot read mla_merge_attn_states.co for %s and %s under %s/hsa\n", gfx.c_str(),
                 other.c_str(), catalog.c_str());
    return 2;
  }

  test_device(gfx);
  test_memory(rng);
  hipModule_t wrong = nullptr;
  HIP_IS(hipErrorNoBinaryForGpu, hipModuleLoadData(&wrong, co_other.data()));
  CHECK(wrong == nullptr);
  Merge m;
  test_launch(co, m, rng);
  test_capture(m, rng);
  HIP_OK(hipModuleUnload(m.module));
  HIP_IS(hipErrorInvalidResourceHandle, hipModuleUnload(m.module));
  std::vector<uint8_t> args(56);
  HIP_IS(hipErrorInvalidResourceHandle, launch(m.fn, 1, 64, args, nullptr));  // its function went with it
  test_trace(read_lines(trace), gfx);
  std::printf("%d of %d checks passed (%ld HIP calls)\n", g_checks - g_failures, g_checks, g_calls);
  return g_failures ? 1 : 0;
}
