// Files that hold records: atomic replacement and checked, fsync'd appends (a write error is never ignored).
#pragma once

#include <string>

namespace sb {

// Writes `bytes` to `path` via a temporary file in the same directory, fsync and rename (and fsyncs the
// directory), so a crash leaves either the old file or the new one. Throws sb::Error naming the file.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Appends `line` (a newline is added) with one write, checks it and fsyncs; throws sb::Error naming the
// file and the system's reason (e.g. "No space left on device").
void append_line_durable(const std::string& path, const std::string& line);

}  // namespace sb
