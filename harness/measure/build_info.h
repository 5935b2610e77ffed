// Build facts recorded with every result: the source commit (stamped at build time) and the build type.
#pragma once

namespace sb {

// Short commit hash of the sources, with "-dirty" when tracked files differed from it; "unknown" outside git.
const char* git_commit();

#ifdef SB_BUILD_TYPE
inline const char* build_type() { return SB_BUILD_TYPE; }
#else
inline const char* build_type() { return "unknown"; }
#endif

}  // namespace sb
