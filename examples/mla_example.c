/* mla_example: load the catalog, run one MLA decode batch, read the output back.
 *
 *   MLA_CATALOG_DIR=out ./mla_example              # HIP backend: needs an AMD GPU (gfx942/gfx950)
 *   MLA_CATALOG_DIR=out ./mla_example --emulator   # the CPU emulator ($MLA_EMULATOR_TARGET, gfx942)
 *
 * Shape: fp8 q, fp8 KV, 16 heads, 1 query row per request, 16 tokens per page (a vLLM-style
 * block table [batch, max_pages]); three requests of 70, 200 and 33 tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mla/mla_runtime.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    mla_status s_ = (call);                                                              \
    if (s_ != MLA_SUCCESS) {                                                             \
      fprintf(stderr, "mla_example: %s: %s\n", mla_status_name(s_), mla_last_error());  \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

enum { BATCH = 3, HEADS = 16, PAGE = 16, MAX_PAGES = 16, NUM_PAGES = BATCH * MAX_PAGES + 5 };

static uint8_t random_fp8(void) { /* small finite e4m3 values of either sign (never a NaN code) */
  return (uint8_t)((1 + rand() % 0x37) | (rand() % 2 ? 0x80 : 0));
}

int main(int argc, char** argv) {
  mla_backend backend = MLA_BACKEND_HIP;
  const char* catalog = NULL; /* NULL: $MLA_CATALOG_DIR */
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--emulator")) backend = MLA_BACKEND_EMULATOR;
    else if (!strcmp(argv[i], "--catalog") && i + 1 < argc) catalog = argv[++i];
    else { fprintf(stderr, "usage: %s [--emulator] [--catalog DIR]\n", argv[0]); return 2; }
  }
  mla_device* dev;
  CHECK(mla_device_open(backend, 0, NULL, &dev));
  mla_device_info info;
  CHECK(mla_device_get_info(dev, &info));
  printf("device: %s (%s, %d CUs)\n", info.name, info.target, info.num_cus);
  mla_context* ctx;
  CHECK(mla_context_create(dev, catalog, &ctx));

  mla_shape shape = {MLA_DTYPE_FP8, MLA_DTYPE_FP8, HEADS, 1, PAGE, 0, 0};
  mla_selection sel;
  CHECK(mla_select(ctx, &shape, MLA_SELECT_EXACT, &sel));
  printf("kernels: %s\n", sel.note);

  const int32_t kv_lens[BATCH] = {70, 200, 33};
  mla_plan* plan;
  CHECK(mla_plan_create(ctx, &sel, BATCH, BATCH * MAX_PAGES * PAGE, &plan));
  size_t ws_bytes;
  CHECK(mla_plan_workspace_size(plan, &ws_bytes));
  CHECK(mla_plan_update(ctx, plan, kv_lens, BATCH, MAX_PAGES)); /* block table stride */
  mla_plan_info pi;
  CHECK(mla_plan_get_info(plan, &pi));
  printf("plan: %d work units, %d split requests, workspace %zu bytes\n", pi.num_units, pi.num_reduce_entries,
         ws_bytes);

  /* Host tensors: random q and KV; each request's pages scattered over the cache. */
  const size_t q_bytes = (size_t)BATCH * HEADS * 576, kv_bytes = (size_t)NUM_PAGES * PAGE * 576;
  const size_t o_count = (size_t)BATCH * HEADS * 512;
  uint8_t* q = malloc(q_bytes);
  uint8_t* kv = malloc(kv_bytes);
  uint16_t* o = malloc(o_count * 2);
  int32_t table[BATCH * MAX_PAGES];
  for (size_t i = 0; i < q_bytes; ++i) q[i] = random_fp8();
  for (size_t i = 0; i < kv_bytes; ++i) kv[i] = random_fp8();
  for (int i = 0; i < BATCH * MAX_PAGES; ++i) table[i] = (i * 7 + 3) % NUM_PAGES; /* distinct page ids */

  uint64_t d_q, d_kv, d_table, d_o, d_ws;
  CHECK(mla_malloc(dev, q_bytes, &d_q));
  CHECK(mla_malloc(dev, kv_bytes, &d_kv));
  CHECK(mla_malloc(dev, sizeof table, &d_table));
  CHECK(mla_malloc(dev, o_count * 2, &d_o));
  CHECK(mla_malloc(dev, ws_bytes, &d_ws));
  CHECK(mla_memcpy_h2d(dev, d_q, q, q_bytes));
  CHECK(mla_memcpy_h2d(dev, d_kv, kv, kv_bytes));
  CHECK(mla_memcpy_h2d(dev, d_table, table, sizeof table));

  mla_decode_args args;
  memset(&args, 0, sizeof args); /* strides 0: contiguous */
  args.q = d_q;
  args.kv = d_kv;
  args.num_pages = NUM_PAGES;
  args.kv_indices = d_table;
  args.o = d_o;
  args.sm_scale = 0.0721687836f; /* 1/sqrt(192) */
  args.q_scale = args.kv_scale = 1.0f;
  CHECK(mla_context_set_option(ctx, MLA_OPTION_VALIDATE, 1)); /* check page ids (host read-back) */
  /* Once per step, where an engine prepares its metadata: the step's tables into the workspace
   * (one copy), with the host scales the kernels read when args give no device pointer. */
  CHECK(mla_plan_upload(ctx, plan, d_ws, ws_bytes, args.q_scale, args.kv_scale, NULL));
  /* Once per layer (capturable in a HIP graph): kernel launches only. */
  CHECK(mla_decode(ctx, plan, &args, d_ws, ws_bytes, NULL));
  CHECK(mla_stream_synchronize(dev, NULL));
  CHECK(mla_memcpy_d2h(dev, o, d_o, o_count * 2));

  double sum = 0;
  size_t bad = 0;
  for (size_t i = 0; i < o_count; ++i) {
    union { uint32_t u; float f; } v = {(uint32_t)o[i] << 16};
    if (v.f != v.f || v.f > 1e30f || v.f < -1e30f) ++bad;
    else sum += v.f;
  }
  printf("o: %zu values, checksum %.6f, %zu non-finite\n", o_count, sum, bad);

  mla_free(dev, d_q); mla_free(dev, d_kv); mla_free(dev, d_table); mla_free(dev, d_o); mla_free(dev, d_ws);
  free(q); free(kv); free(o);
  mla_plan_destroy(plan);
  mla_context_destroy(ctx);
  mla_device_close(dev);
  if (bad) { fprintf(stderr, "mla_example: %zu non-finite outputs\n", bad); return 1; }
  printf("ok\n");
  return 0;
}
