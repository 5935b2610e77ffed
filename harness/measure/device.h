// Devices by name: "cpu" or "cuda", checked against what this build and machine can run.
#pragma once

#include <string>

#include <torch/torch.h>

namespace sb {

// The device a config names; throws sb::Error "device cuda requested but this build has no CUDA" (kernels or
// LibTorch built without it) or "... but no CUDA device is available" before anything runs there.
torch::Device resolve_device(const std::string& name);

// True when this build has the CUDA kernels and a LibTorch with CUDA (a device may still be absent).
bool build_has_cuda();

// "cpu" or "cuda": the type of device tensors actually live on, as records name it.
std::string device_name(const torch::Device& device);

// The LibTorch release this build was compiled against, "major.minor.patch" (as records and run.json name it).
std::string libtorch_version();

}  // namespace sb
