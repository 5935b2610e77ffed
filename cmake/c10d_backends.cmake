# c10d process-group backends for data-parallel training: Gloo (CPU) where LibTorch ships ProcessGroupGloo with
# Gloo's headers (Debian: libtorch-dev + libgloo-dev), NCCL (CUDA) where a CUDA LibTorch 2.x ships ProcessGroupNCCL.
# Sets SB_WITH_GLOO and SB_WITH_NCCL; without them `train --nproc N` and WORLD_SIZE > 1 are refused with the reason.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

option(SB_DIST "Look for c10d process groups (Gloo, NCCL) for data-parallel training" ON)

# Compiles and links a program constructing `class` (a c10d process group) with `define` set, against LibTorch's
# library files named in `libs` (not its imported targets: in a PyPI LibTorch they reference targets, such as a
# placeholder protobuf::libprotobuf, that exist only in this project, not in the check's own) and in the C++
# standard the torch target asks for (C++20 from LibTorch 2.10 on).
function(sb_check_c10d_backend header class define result libs)
  set(files)
  get_filename_component(libdir "${TORCH_LIBRARY}" DIRECTORY)
  foreach(name IN LISTS libs)
    find_library(lib_${name} ${name} PATHS "${libdir}" NO_DEFAULT_PATH NO_CACHE)
    if(lib_${name})
      list(APPEND files "${lib_${name}}")
    endif()
  endforeach()
  if(TARGET CUDA::cudart AND "torch_cuda" IN_LIST libs)
    get_target_property(cudart CUDA::cudart IMPORTED_LOCATION)
    list(APPEND files "${cudart}")
  endif()
  get_target_property(features torch INTERFACE_COMPILE_FEATURES)
  cmake_push_check_state(RESET)
  if("cxx_std_20" IN_LIST features)
    set(CMAKE_CXX_STANDARD 20)
  endif()
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_DEFINITIONS -D${define})
  set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
  set(CMAKE_REQUIRED_LIBRARIES ${files} Threads::Threads)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("
#include <torch/csrc/distributed/c10d/${header}>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
int main(int argc, char**) {
  c10d::TCPStoreOptions store_opts;
  store_opts.isServer = argc > 1;
  auto opts = c10d::${class}::Options::create();
  if (argc > 99) {
    auto store = c10::make_intrusive<c10d::TCPStore>(\"127.0.0.1\", store_opts);
    auto group = c10::make_intrusive<c10d::${class}>(store, 0, 1, opts);
    return group->getRank();
  }
  return 0;
}" ${result})
  cmake_pop_check_state()
  set(${result} ${${result}} PARENT_SCOPE)
endfunction()

set(SB_WITH_GLOO OFF)
set(SB_WITH_NCCL OFF)
if(SB_DIST)
  sb_check_c10d_backend(ProcessGroupGloo.hpp ProcessGroupGloo USE_C10D_GLOO SB_HAVE_C10D_GLOO "torch;torch_cpu;c10")
  if(SB_HAVE_C10D_GLOO)
    set(SB_WITH_GLOO ON)
  endif()
  if(SB_WITH_CUDA AND Torch_VERSION VERSION_GREATER_EQUAL 2.0)
    sb_check_c10d_backend(ProcessGroupNCCL.hpp ProcessGroupNCCL USE_C10D_NCCL SB_HAVE_C10D_NCCL
                          "torch;torch_cpu;torch_cuda;c10;c10_cuda")
    if(SB_HAVE_C10D_NCCL)
      set(SB_WITH_NCCL ON)
    endif()
  endif()
endif()
message(STATUS "sparsebench: data-parallel process groups: Gloo ${SB_WITH_GLOO}, NCCL ${SB_WITH_NCCL}")
