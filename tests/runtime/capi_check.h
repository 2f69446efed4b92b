// Checks of C API calls in the runtime tests: the status and, on failure, mla_last_error().
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "runtime/mla_runtime.h"

// Requires `call` to succeed; the message names the call, its status and the runtime's error.
#define OK(call)                                                                                   \
  do {                                                                                             \
    mla_status s_ = (call);                                                                        \
    INFO(#call << ": " << mla_status_name(s_) << ": " << mla_last_error());                        \
    REQUIRE(s_ == MLA_SUCCESS);                                                                    \
  } while (0)

// Expects `call` to fail with `status` and a message containing `text`.
#define FAILS(call, status, text)                                                                  \
  do {                                                                                             \
    mla_status s_ = (call);                                                                        \
    std::string m_ = mla_last_error();                                                             \
    INFO(#call << " -> " << mla_status_name(s_) << ": " << m_);                                    \
    CHECK(s_ == (status));                                                                         \
    CHECK_THAT(m_, Catch::Matchers::Contains(text));                                               \
  } while (0)
