// CapturedStep: at::cuda::CUDAGraph around a training step where LibTorch has CUDA; a refusal with the reason elsewhere.
#include "harness/lm/captured_step.h"

#include <fmt/format.h>

#if defined(SB_WITH_CUDA) && __has_include(<ATen/cuda/CUDAGraph.h>) && __has_include(<c10/cuda/CUDAStream.h>)
#define SB_CAPTURE 1
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace sb {

#ifdef SB_CAPTURE
struct CapturedStep::Impl {
  at::cuda::CUDAGraph graph;
};
#else
struct CapturedStep::Impl {};
#endif

CapturedStep::CapturedStep() = default;
CapturedStep::~CapturedStep() = default;

bool CapturedStep::available() {
#ifdef SB_CAPTURE
  return true;
#else
  return false;
#endif
}

bool CapturedStep::capture(const torch::Device& device, const std::function<void()>& body, std::string* why) {
  ready_ = false;
#ifdef SB_CAPTURE
  if (!device.is_cuda()) {
    *why = "CUDA graphs need a CUDA device";
    return false;
  }
  const c10::DeviceIndex index = device.index() < 0 ? c10::cuda::current_device() : device.index();
  c10::cuda::CUDAGuard device_guard(index);
  torch::cuda::synchronize(index);  // the warm-up steps (and the static inputs' copies) are done
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, index);
  impl_ = std::make_unique<Impl>();
  try {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    impl_->graph.capture_begin();
    try {
      body();
    } catch (...) {
      // End the broken capture so the stream and the device stay usable; the step then runs uncaptured.
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(side.stream(), &broken);
        if (broken) cudaGraphDestroy(broken);
      }
      (void)cudaGetLastError();
      throw;
    }
    impl_->graph.capture_end();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    const auto nl = msg.find('\n');
    *why = fmt::format("capture failed: {}", nl == std::string::npos ? msg : msg.substr(0, nl));
    impl_.release();  // a half-captured graph's pool cannot be given back safely; it is small and dies with the process
    (void)cudaGetLastError();
    return false;
  }
  torch::cuda::synchronize(index);
  ready_ = true;
  return true;
#else
  (void)device;
  (void)body;
  *why = "this LibTorch has no CUDA graphs";
  return false;
#endif
}

void CapturedStep::replay() {
#ifdef SB_CAPTURE
  impl_->graph.replay();
#endif
}

}  // namespace sb
