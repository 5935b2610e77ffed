# Finds the torch that the Python package is built for: the one the build's interpreter imports. pip's build
# isolation hides an installed torch from that interpreter (its own PYTHONPATH and no user site); then the
# environment's own site-packages are asked, which is where `pip install .` was run. Adds its CMake prefix.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(_sb_probe "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)")
execute_process(COMMAND "${Python3_EXECUTABLE}" -c "${_sb_probe}" OUTPUT_VARIABLE _sb_torch
                RESULT_VARIABLE _sb_rc ERROR_VARIABLE _sb_err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _sb_rc EQUAL 0)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
                          "${Python3_EXECUTABLE}" -c "${_sb_probe}"
                  OUTPUT_VARIABLE _sb_torch RESULT_VARIABLE _sb_rc ERROR_VARIABLE _sb_err2
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(NOT _sb_rc EQUAL 0)
  message(FATAL_ERROR "sparsebench: the Python package is built against PyTorch, and ${Python3_EXECUTABLE} cannot "
                      "import torch (${_sb_err}). Install it first (pip install torch), then pip install . again "
                      "(or pip install --no-build-isolation .).")
endif()
string(REPLACE "\n" ";" _sb_torch "${_sb_torch}")
list(GET _sb_torch 0 _sb_torch_prefix_path)
list(GET _sb_torch 1 _sb_torch_version)
if(_sb_torch_version VERSION_LESS 2.0)
  message(FATAL_ERROR "sparsebench: the Python package needs torch >= 2.0, ${Python3_EXECUTABLE} has "
                      "${_sb_torch_version}")
endif()
message(STATUS "sparsebench: Python package for torch ${_sb_torch_version} (${Python3_EXECUTABLE})")
# A build folder configured for another environment's torch (build-python/ is per wheel tag, not per environment)
# forgets that torch's cached locations, so this one is found.
if(DEFINED SB_PACKAGE_TORCH_PREFIX AND NOT SB_PACKAGE_TORCH_PREFIX STREQUAL _sb_torch_prefix_path)
  foreach(_sb_var Torch_DIR Caffe2_DIR TORCH_LIBRARY c10_LIBRARY kineto_LIBRARY TORCH_CUDA_LIBRARIES c10_cuda_LIBRARY)
    unset(${_sb_var} CACHE)
  endforeach()
endif()
set(SB_PACKAGE_TORCH_PREFIX "${_sb_torch_prefix_path}" CACHE INTERNAL "the torch the package was configured for")
list(PREPEND CMAKE_PREFIX_PATH "${_sb_torch_prefix_path}")
