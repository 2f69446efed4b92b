#include "npy.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace mla::npy {

size_t Array::item_size() const {
  // '<u4', '|u1', '<f4', ...: a byte order, a kind letter, and 1, 2, 4 or 8 bytes.
  if (dtype.size() != 3 || !std::strchr("1248", dtype[2]))
    throw std::runtime_error(fmt::format("npy: dtype '{}' (allowed: 1, 2, 4 or 8-byte items, e.g. '<u4')", dtype));
  return size_t(dtype[2] - '0');
}

size_t Array::count() const {
  size_t n = 1;
  for (size_t d : shape) {
    if (d && n > SIZE_MAX / d) throw std::runtime_error("npy: element count overflows");
    n *= d;
  }
  return n;
}

namespace {

[[noreturn]] void bad_header(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: malformed .npy header: {}", path, what));
}

// Value of key `key` in the header dict, e.g. 'descr': '<u4' -> <u4.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  auto k = header.find("'" + key + "'");
  if (k == std::string::npos) throw std::runtime_error(fmt::format("{}: npy header lacks '{}'", path, key));
  auto colon = header.find(':', k);
  if (colon == std::string::npos) bad_header(path, fmt::format("no ':' after '{}'", key));
  auto start = header.find_first_not_of(" ", colon + 1);
  if (start == std::string::npos) bad_header(path, fmt::format("no value for '{}'", key));
  auto until = [&](char close, size_t from) {
    auto end = header.find(close, from);
    if (end == std::string::npos) bad_header(path, fmt::format("value of '{}' is not closed by '{}'", key, close));
    return header.substr(from, end - from);
  };
  if (header[start] == '\'') return until('\'', start + 1);
  if (header[start] == '(') return until(')', start + 1);
  auto end = header.find_first_of(",}", start);
  if (end == std::string::npos) bad_header(path, fmt::format("value of '{}' is not followed by ',' or '}}'", key));
  return header.substr(start, end - start);
}

// A non-negative decimal shape entry.
size_t shape_entry(const std::string& tok, const std::string& path) {
  if (tok.empty() || tok.size() > 18 || tok.find_first_not_of("0123456789") != std::string::npos)
    bad_header(path, fmt::format("shape entry '{}' (allowed: decimal numbers below 10^18)", tok));
  return size_t(std::stoull(tok));
}

}  // namespace

Array load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open .npy file", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw std::runtime_error(fmt::format("{}: not a .npy file (bad magic)", path));
  int major = bytes[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw std::runtime_error(fmt::format("{}: truncated .npy header", path));
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (size_t(bytes[11]) << 24);
    header_start = 12;
  } else {
    throw std::runtime_error(fmt::format("{}: unsupported .npy version {}", path, major));
  }
  if (header_start + header_len > bytes.size())
    throw std::runtime_error(fmt::format("{}: truncated .npy header", path));
  std::string header(bytes.begin() + header_start, bytes.begin() + header_start + header_len);
  Array a;
  a.dtype = dict_value(header, "descr", path);
  if (a.dtype.size() < 3 || (a.dtype[0] != '<' && a.dtype[0] != '|'))
    throw std::runtime_error(
        fmt::format("{}: dtype '{}' is not little-endian (allowed: '|u1', '<u2', '<i4', '<u4', '<f4')", path, a.dtype));
  if (dict_value(header, "fortran_order", path) != "False")
    throw std::runtime_error(fmt::format("{}: Fortran-order arrays are not supported; save C-order", path));
  std::string shape = dict_value(header, "shape", path);
  size_t pos = 0;
  while (pos < shape.size()) {
    auto end = shape.find(',', pos);
    std::string tok = shape.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    tok.erase(0, tok.find_first_not_of(' '));
    tok.erase(tok.find_last_not_of(' ') + 1);
    if (!tok.empty()) a.shape.push_back(shape_entry(tok, path));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  size_t payload = 0;
  try {
    const size_t n = a.count(), item = a.item_size();
    if (n > SIZE_MAX / item) throw std::runtime_error("npy: payload size overflows");
    payload = n * item;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
  }
  size_t data_start = header_start + header_len;
  if (bytes.size() - data_start < payload)
    throw std::runtime_error(fmt::format("{}: truncated .npy payload: {} bytes, shape needs {}", path,
                                         bytes.size() - data_start, payload));
  a.data.assign(bytes.begin() + data_start, bytes.begin() + data_start + payload);
  return a;
}

void save(const std::string& path, const Array& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += fmt::format("{}{}", a.shape[i], i + 1 < a.shape.size() || a.shape.size() == 1 ? "," : "");
  shape += ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", a.dtype, shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(fmt::format("{}: cannot write .npy file", path));
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.put(char(len & 0xff)).put(char(len >> 8));
  out.write(header.data(), header.size());
  out.write(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  if (!out) throw std::runtime_error(fmt::format("{}: write failed", path));
}

}  // namespace mla::npy
