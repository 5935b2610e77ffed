// Factories of the built-in patterns; each is defined in its own file under patterns/.
#pragma once

#include <algorithm>
#include <memory>

#include "patterns/pattern.h"

namespace sb {

std::unique_ptr<AttentionPattern> make_dense_pattern();
std::unique_ptr<AttentionPattern> make_window_pattern();

}  // namespace sb
