#pragma once
// The check the suites share for errors meant for users: the call throws a troupe::Error whose
// one-line message names what it must.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::test {

/// Expects `f` to throw a troupe::Error whose message contains every one of `parts`.
template <class F>
void expect_error_mentions(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace troupe::test
