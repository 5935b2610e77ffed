// error_of: the message of the sb::Error a call throws ("" when it throws none), for tests that check messages.
#pragma once

#include <functional>
#include <string>

#include "common/error.h"

namespace sb::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace sb::test
