// The launch geometry of a decode kernel: what the runtime needs to plan work units and launch
// them, as the generator records it in catalog.json (`geometry`, MlaGeometry::to_json). Parsed
// once when the catalog opens, then used as typed fields.
#pragma once
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace mla::abi {

struct LaunchGeometry {
  int tile_tokens = 0;     // T: tokens per consumer tile, the planner's cut unit
  int rows_per_group = 0;  // q rows (heads x qseqlen) one workgroup covers
  int row_groups = 0;      // workgroups per (request, kv range)
  int row_blocks = 0;      // 16-row blocks per workgroup
  int kv_splits = 0;       // consumer waves per row block
  int consumers = 0;       // consumer waves per workgroup
  int ring = 0;            // LDS slots
  int slot_tokens = 0;     // tokens per slot
  int lds_row_bytes = 0;   // LDS stride of a token row
  int workgroup_size = 0;  // threads
  int partial_o_bytes = 0; // bytes per element of the partial o it writes: 4 (f32) or 2 (bf16)
  int blocks_per_wave = 1; // row blocks one consumer wave computes (3: the wide prefix kernel)
};

// Throws std::invalid_argument naming the field that is missing, not an integer, or < 1.
inline LaunchGeometry launch_geometry_from_json(const nlohmann::json& g) {
  LaunchGeometry l;
  auto get = [&](const char* field, int& out) {
    if (!g.is_object() || !g.contains(field) || !g.at(field).is_number_integer() || g.at(field).get<int64_t>() < 1 ||
        g.at(field).get<int64_t>() > (1 << 30))
      throw std::invalid_argument(std::string("geometry.") + field + " is missing or not a positive integer");
    out = g.at(field).get<int>();
  };
  get("tile_tokens", l.tile_tokens);
  get("rows_per_group", l.rows_per_group);
  get("row_groups", l.row_groups);
  get("row_blocks", l.row_blocks);
  get("kv_splits", l.kv_splits);
  get("consumers", l.consumers);
  get("ring", l.ring);
  get("slot_tokens", l.slot_tokens);
  get("lds_row_bytes", l.lds_row_bytes);
  get("workgroup_size", l.workgroup_size);
  get("partial_o_bytes", l.partial_o_bytes);
  if (g.contains("blocks_per_wave")) get("blocks_per_wave", l.blocks_per_wave);
  if (l.blocks_per_wave * l.consumers * 16 != l.rows_per_group && l.kv_splits == 1)
    throw std::invalid_argument("geometry: blocks_per_wave x consumers x 16 = " +
                                std::to_string(l.blocks_per_wave * l.consumers * 16) + " rows, rows_per_group = " +
                                std::to_string(l.rows_per_group));
  if (l.partial_o_bytes != 2 && l.partial_o_bytes != 4)
    throw std::invalid_argument("geometry.partial_o_bytes = " + std::to_string(l.partial_o_bytes) +
                                " (allowed: 2 for bf16 partials, 4 for f32)");
  return l;
}

}  // namespace mla::abi
