// Training checkpoints: a checksummed LibTorch archive written with temp file + fsync + rename.
#include "harness/lm/checkpoint.h"

#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/json_guard.h"
#include "harness/lm/data.h"

namespace sb {

void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     const TrainState& state) {
  torch::serialize::OutputArchive archive, model_ar, optim_ar;
  model.save(model_ar);
  optimizer.save(optim_ar);
  archive.write("model", model_ar);
  archive.write("optimizer", optim_ar);
  archive.write("step", c10::IValue(state.step));
  archive.write("train_s", c10::IValue(state.train_s));
  archive.write("data_rng", c10::IValue(state.data_rng));
  archive.write("info", c10::IValue(state.info.dump()));
  archive.write("torch_rng", torch::globalContext().defaultGenerator(torch::kCPU).get_state());
  std::ostringstream body;
  archive.save_to(body);
  const std::string payload = body.str();
  write_file_atomic(path, checkpoint_file_bytes(payload));
}

TrainState load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  const std::string payload = read_checkpoint_payload(path);
  TrainState state;
  try {
    std::istringstream body(payload);
    torch::serialize::InputArchive archive, model_ar, optim_ar;
    archive.load_from(body);
    archive.read("model", model_ar);
    archive.read("optimizer", optim_ar);
    model.load(model_ar);
    optimizer.load(optim_ar);
    c10::IValue v;
    archive.read("step", v);
    state.step = v.toInt();
    archive.read("train_s", v);
    state.train_s = v.toDouble();
    archive.read("data_rng", v);
    state.data_rng = v.toStringRef();
    archive.read("info", v);
    state.info = parse_json_guarded(v.toStringRef(), fmt::format("checkpoint '{}': info", path), false);
    torch::Tensor rng;
    archive.read("torch_rng", rng);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw Error(fmt::format("checkpoint '{}' cannot be restored (does it match this model's configuration?): {}",
                            path, what.substr(0, what.find('\n'))));
  }
  return state;
}

}  // namespace sb
