/* The runtime's HIP backend (MLA_BACKEND_HIP) on the HIP test device against its emulator backend
 * (MLA_BACKEND_EMULATOR), through libmla_runtime.so as a host program uses it: the same random
 * batch decoded on both must give bit-identical o. Then the HIP path as an engine runs it under
 * graph capture: mla_decode (kernel launches only) captured on a hipStream, the graph replayed
 * for two different q, each against the emulator backend's direct decode of that q.
 *
 *   test_runtime_hip <catalog dir>     (the HIP test device is this program's libamdhip64, so the
 *                                       runtime finds it already loaded; its target,
 *                                       MLA_HIP_TEST_DEVICE_TARGET, is the emulator backend's too;
 *                                       MLA_HIP_TRACE may name its trace file, which is then checked)
 *
 * The runtime calls, per device (decode_step below is what an engine does per step):
 *   mla_device_open, mla_device_get_info, mla_context_create, mla_select (exact),
 *   mla_plan_create, mla_plan_workspace_size, mla_plan_update, mla_plan_get_info,
 *   mla_malloc / mla_memcpy_h2d (q, kv, page table, workspace, o),
 *   per step: mla_memcpy_h2d (q), mla_memset (o poisoned 0xff), mla_plan_upload, mla_decode,
 *   mla_stream_synchronize, mla_memcpy_d2h (o). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hip/hip_runtime_api.h>
#include <mla/mla_runtime.h>

enum { BATCH = 4, HEADS = 16, PAGE = 16, MAX_PAGES = 48, NUM_PAGES = BATCH * MAX_PAGES + 7 };
#define Q_BYTES ((size_t)BATCH * HEADS * 576)
#define KV_BYTES ((size_t)NUM_PAGES * PAGE * 576)
#define O_COUNT ((size_t)BATCH * HEADS * 512)

static int failures = 0;
#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      ++failures;                                                \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
    }                                                            \
  } while (0)
#define MLA(call)                                                                                         \
  do {                                                                                                    \
    mla_status s_ = (call);                                                                               \
    if (s_ != MLA_SUCCESS) {                                                                              \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, mla_status_name(s_), mla_last_error()); \
      exit(1);                                                                                            \
    }                                                                                                     \
  } while (0)
#define HIP(call)                                                                                          \
  do {                                                                                                     \
    hipError_t e_ = (call);                                                                                \
    if (e_ != hipSuccess) {                                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, hipGetErrorName(e_));                  \
      exit(1);                                                                                             \
    }                                                                                                      \
  } while (0)

static uint32_t rng = 12345u;
static uint32_t next_random(void) { /* xorshift32 */
  rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
  return rng;
}
static uint8_t random_fp8(void) { /* small finite e4m3 (FNUZ or OCP) of either sign, never a NaN code */
  uint32_t r = next_random();
  return (uint8_t)((1 + r % 0x37) | ((r >> 8) & 1 ? 0x80 : 0));
}

typedef struct Inputs {
  uint8_t q[Q_BYTES], kv[KV_BYTES];
  int32_t table[BATCH * MAX_PAGES];
  int32_t kv_lens[BATCH];
} Inputs;

typedef struct Session {
  mla_device* dev;
  mla_device_info info;
  mla_context* ctx;
  mla_selection sel;
  mla_plan* plan;
  mla_plan_info plan_info;
  size_t ws_bytes;
  uint64_t q, kv, table, o, ws;
  mla_decode_args args;
} Session;

static void session_open(Session* s, mla_backend backend, const char* target, const char* catalog, const Inputs* in) {
  memset(s, 0, sizeof *s);
  MLA(mla_device_open(backend, 0, target, &s->dev));
  MLA(mla_device_get_info(s->dev, &s->info));
  MLA(mla_context_create(s->dev, catalog, &s->ctx));
  mla_shape shape = {MLA_DTYPE_FP8, MLA_DTYPE_FP8, HEADS, 1, PAGE, 0, 0};
  MLA(mla_select(s->ctx, &shape, MLA_SELECT_EXACT, &s->sel));
  MLA(mla_plan_create(s->ctx, &s->sel, BATCH, BATCH * MAX_PAGES * PAGE, &s->plan));
  MLA(mla_plan_workspace_size(s->plan, &s->ws_bytes));
  MLA(mla_plan_update(s->ctx, s->plan, in->kv_lens, BATCH, MAX_PAGES));
  MLA(mla_plan_get_info(s->plan, &s->plan_info));
  MLA(mla_malloc(s->dev, Q_BYTES, &s->q));
  MLA(mla_malloc(s->dev, KV_BYTES, &s->kv));
  MLA(mla_malloc(s->dev, sizeof in->table, &s->table));
  MLA(mla_malloc(s->dev, O_COUNT * 2, &s->o));
  MLA(mla_malloc(s->dev, s->ws_bytes, &s->ws));
  MLA(mla_memcpy_h2d(s->dev, s->kv, in->kv, KV_BYTES));
  MLA(mla_memcpy_h2d(s->dev, s->table, in->table, sizeof in->table));
  memset(&s->args, 0, sizeof s->args);
  s->args.q = s->q;
  s->args.kv = s->kv;
  s->args.num_pages = NUM_PAGES;
  s->args.kv_indices = s->table;
  s->args.o = s->o;
  s->args.sm_scale = 0.0721687836f;
  s->args.q_scale = 1.0f;
  s->args.kv_scale = 1.0f;
}

/* One step with `q`: what an engine does per step (the upload outside any capture). */
static void decode_step(Session* s, const uint8_t* q, void* stream) {
  MLA(mla_memcpy_h2d(s->dev, s->q, q, Q_BYTES));
  MLA(mla_memset(s->dev, s->o, 0xff, O_COUNT * 2)); /* poison: an unwritten element stays 0xffff */
  MLA(mla_plan_upload(s->ctx, s->plan, s->ws, s->ws_bytes, s->args.q_scale, s->args.kv_scale, stream));
  MLA(mla_decode(s->ctx, s->plan, &s->args, s->ws, s->ws_bytes, stream));
  MLA(mla_stream_synchronize(s->dev, stream));
}

static void read_o(Session* s, uint16_t* o) { MLA(mla_memcpy_d2h(s->dev, o, s->o, O_COUNT * 2)); }

static void session_close(Session* s) {
  uint64_t bufs[] = {s->q, s->kv, s->table, s->o, s->ws};
  for (int i = 0; i < 5; ++i) MLA(mla_free(s->dev, bufs[i]));
  mla_plan_destroy(s->plan);
  mla_context_destroy(s->ctx);
  mla_device_close(s->dev);
}

/* Elements that differ in bits; `o` must also be fully written (no poison left) and finite. */
static size_t differing(const uint16_t* a, const uint16_t* b) {
  size_t n = 0;
  for (size_t i = 0; i < O_COUNT; ++i) n += a[i] != b[i];
  return n;
}
static size_t unwritten_or_nonfinite(const uint16_t* o) {
  size_t n = 0;
  for (size_t i = 0; i < O_COUNT; ++i) n += (o[i] & 0x7f80) == 0x7f80; /* bf16 exponent all ones: inf / NaN */
  return n;
}

static int trace_has(const char* path, const char* a, const char* b, int* count) {
  FILE* f = fopen(path, "r");
  char line[4096];
  *count = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, a) && (!b || strstr(line, b))) ++*count;
  fclose(f);
  return *count > 0;
}

static Inputs in; /* large: static */
static uint16_t o_emu[O_COUNT], o_hip[O_COUNT], o_emu2[O_COUNT], o_graph[O_COUNT];
static uint8_t q2[Q_BYTES];

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <catalog dir>\n", argv[0]);
    return 2;
  }
  const char* catalog = argv[1];
  const char* target = getenv("MLA_HIP_TEST_DEVICE_TARGET");
  if (!target || !*target) target = "gfx942";
  const char* trace = getenv("MLA_HIP_TRACE");
  if (trace && *trace) remove(trace); /* before the first HIP call opens it */
  /* Random batch: lengths 1..760 (one long request so that it splits and the reduce runs), q
   * and KV random fp8, each request's pages scattered (distinct ids). */
  const int32_t lens[BATCH] = {1 + (int32_t)(next_random() % 120), 700 + (int32_t)(next_random() % 60),
                               17 + (int32_t)(next_random() % 200), 1 + (int32_t)(next_random() % 400)};
  memcpy(in.kv_lens, lens, sizeof lens);
  for (size_t i = 0; i < Q_BYTES; ++i) in.q[i] = random_fp8();
  for (size_t i = 0; i < KV_BYTES; ++i) in.kv[i] = random_fp8();
  for (size_t i = 0; i < Q_BYTES; ++i) q2[i] = random_fp8();
  const int32_t stride = 7 + (int32_t)(next_random() % 20) * 2 + 1; /* odd: coprime with NUM_PAGES's factors */
  for (int i = 0; i < BATCH * MAX_PAGES; ++i) in.table[i] = (int32_t)(((int64_t)i * stride + 3) % NUM_PAGES);

  /* The emulator backend: the reference for both q. */
  Session emu;
  session_open(&emu, MLA_BACKEND_EMULATOR, target, catalog, &in);
  decode_step(&emu, in.q, NULL);
  read_o(&emu, o_emu);
  decode_step(&emu, q2, NULL);
  read_o(&emu, o_emu2);
  EXPECT(emu.plan_info.num_reduce_entries > 0, "no request split: the reduce kernel would not run");

  /* The HIP backend on the test device. */
  Session hip;
  session_open(&hip, MLA_BACKEND_HIP, NULL, catalog, &in);
  char want_name[64];
  snprintf(want_name, sizeof want_name, "MLA HIP test device (emulator %s)", target);
  EXPECT(strcmp(hip.info.name, want_name) == 0, "device name '%s'", hip.info.name);
  EXPECT(strcmp(hip.info.target, target) == 0 && strcmp(emu.info.target, target) == 0, "targets '%s' / '%s'",
         hip.info.target, emu.info.target);
  EXPECT(hip.info.num_cus == emu.info.num_cus, "%d CUs, the emulator backend %d", hip.info.num_cus, emu.info.num_cus);
  EXPECT(hip.plan_info.num_units == emu.plan_info.num_units &&
             hip.plan_info.num_reduce_entries == emu.plan_info.num_reduce_entries,
         "plans differ: %d units / %d reduces on HIP, %d / %d on the emulator", hip.plan_info.num_units,
         hip.plan_info.num_reduce_entries, emu.plan_info.num_units, emu.plan_info.num_reduce_entries);
  decode_step(&hip, in.q, NULL);
  read_o(&hip, o_hip);
  EXPECT(unwritten_or_nonfinite(o_emu) == 0, "%zu emulator outputs unwritten or not finite", unwritten_or_nonfinite(o_emu));
  EXPECT(differing(o_hip, o_emu) == 0, "%zu of %zu outputs differ between the HIP and emulator backends",
         differing(o_hip, o_emu), (size_t)O_COUNT);
  EXPECT(differing(o_emu, o_emu2) > O_COUNT / 2, "the second q changed only %zu outputs", differing(o_emu, o_emu2));

  /* Graph capture of mla_decode on a stream, replayed for q2 then q (inputs changed between). */
  hipStream_t stream;
  HIP(hipStreamCreate(&stream));
  MLA(mla_plan_upload(hip.ctx, hip.plan, hip.ws, hip.ws_bytes, hip.args.q_scale, hip.args.kv_scale, stream));
  HIP(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
  MLA(mla_decode(hip.ctx, hip.plan, &hip.args, hip.ws, hip.ws_bytes, stream));
  hipGraph_t graph;
  HIP(hipStreamEndCapture(stream, &graph));
  hipGraphExec_t exec;
  HIP(hipGraphInstantiate(&exec, graph, NULL, NULL, 0));
  const uint8_t* qs[2] = {q2, in.q};
  const uint16_t* want[2] = {o_emu2, o_emu};
  for (int round = 0; round < 2; ++round) {
    MLA(mla_memcpy_h2d(hip.dev, hip.q, qs[round], Q_BYTES));
    MLA(mla_memset(hip.dev, hip.o, 0xff, O_COUNT * 2));
    HIP(hipGraphLaunch(exec, stream));
    HIP(hipStreamSynchronize(stream));
    read_o(&hip, o_graph);
    EXPECT(differing(o_graph, want[round]) == 0, "graph replay %d: %zu outputs differ from the emulator backend's",
           round, differing(o_graph, want[round]));
  }
  HIP(hipGraphExecDestroy(exec));
  HIP(hipGraphDestroy(graph));
  HIP(hipStreamDestroy(stream));

  /* The trace shows the HIP path ran on the device: launches, the pinned upload, the capture. */
  if (trace && *trace) {
    char decode_fn[160];
    snprintf(decode_fn, sizeof decode_fn, "function=%s ", hip.sel.decode_kernel);
    int n = 0;
    EXPECT(trace_has(trace, "hipGetDevicePropertiesR0600 device=0 -> hipSuccess", NULL, &n), "no R0600 query");
    EXPECT(trace_has(trace, "hipModuleLaunchKernel stream=0 ", decode_fn, &n) && n == 1, "%d direct decode launches", n);
    EXPECT(trace_has(trace, "hipModuleLaunchKernel stream=", "captured -> hipSuccess", &n) &&
               n == hip.plan_info.num_launches,
           "%d captured launches, the plan has %d", n, hip.plan_info.num_launches);
    EXPECT(trace_has(trace, "replay hipModuleLaunchKernel stream=", decode_fn, &n) && n == 2, "%d replayed decodes", n);
    EXPECT(trace_has(trace, "hipMemcpyAsync stream=", "dir=H2D host=pinned", &n), "mla_plan_upload's copy is not from pinned memory");
    EXPECT(!trace_has(trace, "-> hipError", NULL, &n), "%d HIP calls failed", n);
  }

  session_close(&hip);
  session_close(&emu);
  if (failures) return 1;
  printf("%s: HIP backend on the test device: o bit-identical to the emulator backend (%zu values, %d units, %d reduces); "
         "graph replays of mla_decode match for two q\n",
         target, (size_t)O_COUNT, hip.plan_info.num_units, hip.plan_info.num_reduce_entries);
  return 0;
}
