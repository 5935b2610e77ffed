// Reading files whole; writing them whole or not at all is common/durable_file.h (included here).
#pragma once

#include <string>

#include "common/durable_file.h"

namespace sb {

// The whole file; `exists` says whether it could be opened ("" when not).
std::string read_file(const std::string& path, bool* exists);

}  // namespace sb
