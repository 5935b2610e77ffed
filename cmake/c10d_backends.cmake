# c10d process-group backends for data-parallel training: Gloo (CPU) where LibTorch ships ProcessGroupGloo with
# Gloo's headers (Debian: libtorch-dev + libgloo-dev), NCCL (CUDA) where a CUDA LibTorch 2.x ships ProcessGroupNCCL.
# Sets SB_WITH_GLOO and SB_WITH_NCCL; without them `train --nproc N` and WORLD_SIZE > 1 are refused with the reason.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

option(SB_DIST "Look for c10d process groups (Gloo, NCCL) for data-parallel training" ON)

# Compiles and links a program constructing `class` (a c10d process group) with `define` set.
function(sb_check_c10d_backend header class define result)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_DEFINITIONS -D${define})
  set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
  set(CMAKE_REQUIRED_LIBRARIES ${TORCH_LIBRARIES})
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
  sb_check_c10d_backend(ProcessGroupGloo.hpp ProcessGroupGloo USE_C10D_GLOO SB_HAVE_C10D_GLOO)
  if(SB_HAVE_C10D_GLOO)
    set(SB_WITH_GLOO ON)
  endif()
  if(SB_WITH_CUDA AND Torch_VERSION VERSION_GREATER_EQUAL 2.0)
    sb_check_c10d_backend(ProcessGroupNCCL.hpp ProcessGroupNCCL USE_C10D_NCCL SB_HAVE_C10D_NCCL)
    if(SB_HAVE_C10D_NCCL)
      set(SB_WITH_NCCL ON)
    endif()
  endif()
endif()
message(STATUS "sparsebench: data-parallel process groups: Gloo ${SB_WITH_GLOO}, NCCL ${SB_WITH_NCCL}")
