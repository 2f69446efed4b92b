// NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order): the exchange format of
// dispatch buffers, golden vectors and MLA problems.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mla::npy {

struct Array {
  std::string dtype;           // NumPy descr, e.g. "<u4", "|u1", "<f4", "<i4", "<u2"
  std::vector<size_t> shape;   // C order
  std::vector<uint8_t> data;   // raw little-endian bytes, size == count() * item_size()

  size_t count() const;
  size_t item_size() const;  // from dtype, e.g. 4 for "<u4"

  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(data.data()); }
  template <class T>
  T* as() { return reinterpret_cast<T*>(data.data()); }
};

// Reads a .npy file. Errors (missing file, bad magic, Fortran order, big-endian data,
// truncated payload) throw std::runtime_error naming the path and what is wrong.
Array load(const std::string& path);
// Writes a .npy (format 1.0). Throws std::runtime_error naming the path on failure.
void save(const std::string& path, const Array& array);

// Helpers to build arrays from typed vectors. dtype examples: "<u4", "<f4", "<i4", "<u2", "|u1".
template <class T>
Array make(const std::string& dtype, std::vector<size_t> shape, const std::vector<T>& values) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(values.size() * sizeof(T));
  if (!values.empty()) __builtin_memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

}  // namespace mla::npy
