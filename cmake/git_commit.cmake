# Writes OUT (a C++ source defining sb::git_commit()) from `git describe` of SRC; rewrites it only on change,
# so every build records the commit it was built from without recompiling anything else.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  # Uncommitted changes to tracked files make the build differ from the commit: say so.
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY "${SRC}" RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "// Generated at build time by cmake/git_commit.cmake: the commit this binary was built from.\n")
string(APPEND text "#include \"harness/measure/build_info.h\"\n\nnamespace sb {\n\n")
string(APPEND text "const char* git_commit() { return \"${commit}\"; }\n\n}  // namespace sb\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
