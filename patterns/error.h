// Forwards to common/error.h, where sb::Error lives below every layer (kept for kernel sources that name this path).
#pragma once

#include "common/error.h"
