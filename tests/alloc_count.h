// Heap allocations counted while a window is open (AllocWindow), for "a second plan update
// allocates nothing" (tests/runtime/test_planner.cpp, bench/plan_bench.cpp). It replaces the
// executable's global operator new and delete: include it in exactly one translation unit of an
// executable. Every non-aligned variant is replaced, so that none comes from elsewhere (a
// sanitizer runtime's) and meets a delete of another family; outside a window they are malloc/free.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace mla::alloc_count {
inline thread_local bool counting = false;
inline thread_local size_t allocations = 0;
inline void* counted_malloc(std::size_t n) noexcept {
  if (counting) ++allocations;
  return std::malloc(n ? n : 1);
}
}  // namespace mla::alloc_count

// This thread's allocations from construction to close() (or destruction).
struct AllocWindow {
  AllocWindow() { mla::alloc_count::allocations = 0, mla::alloc_count::counting = true; }
  ~AllocWindow() { mla::alloc_count::counting = false; }
  size_t close() {
    mla::alloc_count::counting = false;
    return mla::alloc_count::allocations;
  }
};

void* operator new(std::size_t n) {
  if (void* p = mla::alloc_count::counted_malloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = mla::alloc_count::counted_malloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return mla::alloc_count::counted_malloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return mla::alloc_count::counted_malloc(n); }
// (GCC sees free() of operator new's pointer once these are inlined: that is the point here.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
