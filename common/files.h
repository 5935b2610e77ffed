// Files written whole or not at all.
#pragma once

#include <string>

namespace sb {

// Writes `bytes` to `path` via a temporary file in the same directory, fsync and rename, so a crash
// leaves either the old file or the new one. Throws sb::Error naming the file.
void write_file_atomic(const std::string& path, const std::string& bytes);

// The whole file; `exists` says whether it could be opened ("" when not).
std::string read_file(const std::string& path, bool* exists);

}  // namespace sb
