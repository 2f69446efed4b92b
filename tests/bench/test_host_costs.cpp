// mlabench's host costs (issue #31 item 8): the figures are the C API's, on the shapes' catalogs.
#include <catch2/catch.hpp>

#include "bench/bench.h"

using namespace mla;
using namespace mla::bench;

TEST_CASE("bench: host costs of a step and a layer are measured through the C API", "[bench][host]") {
  std::vector<BenchShape> shapes = {seed001_shapes().front()};  // 32K x1 on gfx942, 304 CUs
  REQUIRE(shapes[0].name == "32K x1");
  const auto all = host_cost_shapes(shapes);
  REQUIRE(all.size() == 5);  // + 64 and 256 requests of 8K on both seeds' kernels
  CHECK(all[1].kv_lens.size() == 64);
  CHECK(all.back().kv_lens.size() == 256);
  const auto costs = measure_host_costs(shapes, 5);
  REQUIRE(costs.size() == 1);
  const HostCost& h = costs[0];
  CHECK(h.launches == 3);  // decode, prefix, reduce on capacity grids
  // One 32K request split over the CUs the cost model feeds (at most 304 units) and its reduce
  // entry, behind the scales and three launch headers, then the decode and prefix launches'
  // workgroup ranges (int32[305] each: both kernels hold one workgroup per CU).
  const size_t entries = h.upload_bytes - 128 - 4 * 2 * 305;
  CHECK(entries % 32 == 0);
  CHECK(entries / 32 >= 200 + 1);
  CHECK(entries / 32 <= 304 + 1);
  CHECK(h.update_us > 0);
  CHECK(h.upload_us > 0);
  CHECK(h.decode_host_us > 0);
  CHECK(h.decode_grid >= 304);
  CHECK(h.update_given_us == 0);  // no shared prefix in this shape
  const auto j = h.to_json();
  CHECK(j.at("launches_per_layer") == 3);
  CHECK(j.at("upload_bytes") == h.upload_bytes);
}
