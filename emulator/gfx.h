// The two targets the emulator models.
#pragma once
#include <optional>
#include <string_view>

namespace mla::emu {

enum class Gfx { gfx942, gfx950 };

inline std::string_view gfx_name(Gfx g) { return g == Gfx::gfx942 ? "gfx942" : "gfx950"; }
inline std::optional<Gfx> parse_gfx(std::string_view s) {
  if (s.substr(0, 6) == "gfx942") return Gfx::gfx942;
  if (s.substr(0, 6) == "gfx950") return Gfx::gfx950;
  return std::nullopt;
}

}  // namespace mla::emu
