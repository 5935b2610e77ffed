// expect_error: the kernel tests' check that a call throws sb::Error with exactly a given message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace sb::test {

// Expects sb::Error with exactly `message` from f().
template <typename F>
void expect_error(F f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected sb::Error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

}  // namespace sb::test
