// sb::Error: the one exception type for bad input; its message is shown to the user as is.
#pragma once

#include <stdexcept>
#include <string>

namespace sb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace sb
