// A minimal PNG writer (RGB8, zlib stored blocks) and the bench plot: modeled time per shape
// (log scale, with the seed's published figures as markers) and byte efficiency per shape.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "bench/bench.h"

namespace mla::bench {

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc) {
  static uint32_t table[256];
  static bool init = false;
  if (!init) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    init = true;
  }
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t* p, size_t n) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < n; ++i) {
    a = (a + p[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

namespace {
void be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}
void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  be32(out, uint32_t(data.size()));
  std::vector<uint8_t> td(type, type + 4);
  td.insert(td.end(), data.begin(), data.end());
  out.insert(out.end(), td.begin(), td.end());
  be32(out, crc32(td.data(), td.size()));
}
}  // namespace

std::vector<uint8_t> encode_png(int w, int h, const std::vector<uint8_t>& rgb) {
  if (w <= 0 || h <= 0 || rgb.size() != size_t(w) * h * 3) throw std::invalid_argument("encode_png: bad image size");
  std::vector<uint8_t> raw;  // filter byte 0 per row
  raw.reserve(size_t(h) * (w * 3 + 1));
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + size_t(y) * w * 3, rgb.begin() + size_t(y + 1) * w * 3);
  }
  std::vector<uint8_t> z = {0x78, 0x01};
  for (size_t off = 0; off < raw.size() || off == 0; off += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - off);
    const bool last = off + n >= raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(uint8_t(n));
    z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n));
    z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + off, raw.begin() + off + n);
    if (last) break;
  }
  be32(z, adler32(raw.data(), raw.size()));
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  be32(ihdr, uint32_t(w));
  be32(ihdr, uint32_t(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter method, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  return out;
}

namespace {

// 3x5 glyphs, rows top to bottom, bits 4 2 1 = left middle right.
const uint8_t* glyph(char c) {
  static const struct {
    char c;
    uint8_t r[5];
  } kFont[] = {
      {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
      {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
      {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}},
      {'C', {7, 4, 4, 4, 7}}, {'D', {6, 5, 5, 5, 6}}, {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}},
      {'G', {7, 4, 5, 5, 7}}, {'H', {5, 5, 7, 5, 5}}, {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 7}},
      {'K', {5, 5, 6, 5, 5}}, {'L', {4, 4, 4, 4, 7}}, {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}},
      {'O', {7, 5, 5, 5, 7}}, {'P', {7, 5, 7, 4, 4}}, {'Q', {7, 5, 5, 7, 1}}, {'R', {6, 5, 6, 5, 5}},
      {'S', {7, 4, 7, 1, 7}}, {'T', {7, 2, 2, 2, 2}}, {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}},
      {'W', {5, 5, 7, 7, 5}}, {'X', {5, 5, 2, 5, 5}}, {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}},
      {'.', {0, 0, 0, 0, 2}}, {'/', {1, 1, 2, 4, 4}}, {'-', {0, 0, 7, 0, 0}}, {'%', {5, 1, 2, 4, 5}},
      {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {'x', {0, 5, 2, 5, 0}}, {':', {0, 2, 0, 2, 0}},
      {'=', {0, 7, 0, 7, 0}}, {'+', {0, 2, 7, 2, 0}}, {'<', {1, 2, 4, 2, 1}}, {'>', {4, 2, 1, 2, 4}}, {',', {0, 0, 0, 2, 4}},
  };
  static const uint8_t blank[5] = {0, 0, 0, 0, 0};
  char u = (c >= 'a' && c <= 'z' && c != 'x') ? char(c - 32) : c;
  for (const auto& g : kFont)
    if (g.c == u) return g.r;
  return blank;
}

struct Canvas {
  int w, h;
  std::vector<uint8_t> px;
  Canvas(int w_, int h_) : w(w_), h(h_), px(size_t(w_) * h_ * 3, 255) {}
  void set(int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    uint8_t* p = &px[(size_t(y) * w + x) * 3];
    p[0] = uint8_t(rgb >> 16);
    p[1] = uint8_t(rgb >> 8);
    p[2] = uint8_t(rgb);
  }
  void rect(int x0, int y0, int x1, int y1, uint32_t rgb) {
    for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
      for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) set(x, y, rgb);
  }
  // Text at scale s; vertical = one character under the other.
  void text(int x, int y, const std::string& t, uint32_t rgb, int s = 2, bool vertical = false) {
    for (char c : t) {
      const uint8_t* g = glyph(c);
      for (int r = 0; r < 5; ++r)
        for (int b = 0; b < 3; ++b)
          if (g[r] & (4 >> b)) rect(x + b * s, y + r * s, x + b * s + s - 1, y + r * s + s - 1, rgb);
      if (vertical) y += 6 * s;
      else x += 4 * s;
    }
  }
};

std::string short_label(const ShapeResult& r) {
  if (r.shape.set == "seed-001") return fmt::format("{}Kx{}", r.shape.ctx_k, r.shape.concurrency);
  if (r.shape.set == "seed-000") return fmt::format("K3C{}P{}", r.shape.concurrency, r.shape.shape.page_size);
  return fmt::format("B{}", r.shape.kv_lens.size());
}

}  // namespace

std::vector<uint8_t> plot_png(const std::vector<ShapeResult>& r, int& W, int& H) {
  const int n = std::max<int>(1, int(r.size()));
  const int slot = 44, left = 90, right = 20;
  W = left + right + n * slot;
  H = 820;
  Canvas c(W, H);
  const uint32_t axis = 0x000000, grid = 0xdddddd, bar = 0x4472c4, pub = 0xc00000, eff = 0x70ad47;
  // Panel 1: modeled us, log10 axis from 1 to 10^4.
  const int p1t = 50, p1b = 400;
  c.text(10, 10, "MODELED TIME US (LOG) - NOT MEASURED. RED DOT: SEED-001 PUBLISHED (THEIR KERNEL)", axis, 2);
  auto ylog = [&](double us) {
    double v = std::clamp(std::log10(std::max(us, 1.0)) / 4.0, 0.0, 1.0);
    return p1b - int(v * (p1b - p1t));
  };
  for (int d = 0; d <= 4; ++d) {
    int y = ylog(std::pow(10.0, d));
    c.rect(left, y, W - right, y, grid);
    c.text(10, y - 5, fmt::format("{}", int(std::pow(10.0, d))), axis, 2);
  }
  // Panel 2: byte efficiency = minimum bytes / bytes moved, axis 0 .. 1.
  const int p2t = 470, p2b = 700;
  c.text(10, 440, "BYTE EFFICIENCY = (KV+IDX+Q+O) / BYTES MOVED INCL. PARTIALS (MEASURED, EMULATOR)", axis, 2);
  auto yeff = [&](double e) {
    double v = std::clamp(e, 0.0, 1.0);
    return p2b - int(v * (p2b - p2t));
  };
  for (double e : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    int y = yeff(e);
    c.rect(left, y, W - right, y, grid);
    c.text(10, y - 5, fmt::format("{:.2f}", e), axis, 2);
  }
  for (int i = 0; i < int(r.size()); ++i) {
    const int x0 = left + i * slot + 8, x1 = x0 + slot - 16;
    const double us = r[i].modeled.total_s * 1e6;
    c.rect(x0, ylog(us), x1, p1b, bar);
    if (r[i].shape.pub_ours_us) {
      int y = ylog(*r[i].shape.pub_ours_us), xm = (x0 + x1) / 2;
      c.rect(xm - 4, y - 4, xm + 4, y + 4, pub);
    }
    const double e = 1.0 / r[i].ratio_moved_over_min;
    c.rect(x0, yeff(e), x1, p2b, eff);
    c.text(x0 + 4, p2b + 12, short_label(r[i]), axis, 2, true);
  }
  c.rect(left, p1t, left, p1b, axis);
  c.rect(left, p1b, W - right, p1b, axis);
  c.rect(left, p2t, left, p2b, axis);
  c.rect(left, p2b, W - right, p2b, axis);
  return encode_png(W, H, c.px);
}

}  // namespace mla::bench
