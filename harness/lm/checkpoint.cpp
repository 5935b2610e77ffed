// Training checkpoints: a checksummed LibTorch archive written with temp file + fsync + rename.
#include "harness/lm/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "common/files.h"
#include "harness/lm/data.h"
#include "common/error.h"

namespace sb {

namespace {

constexpr const char* kMagic = "SBCKPT1\n";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = kMagicLen + 64 + 1;

std::string payload_sha(const std::string& s, size_t from) {
  return sha256_hex(reinterpret_cast<const uint8_t*>(s.data()) + from, s.size() - from);
}

}  // namespace

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
  std::string file = kMagic;
  file += sha256_hex(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  file += '\n';
  file += payload;
  write_file_atomic(path, file);
}

TrainState load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("checkpoint '{}': cannot open: {}", path, std::strerror(errno)));
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < kHeaderLen || file.compare(0, kMagicLen, kMagic) != 0) {
    throw Error(fmt::format("checkpoint '{}' is not a sparsebench checkpoint (bad header); delete it or drop --resume",
                            path));
  }
  if (file.compare(kMagicLen, 64, payload_sha(file, kHeaderLen)) != 0) {
    throw Error(fmt::format("checkpoint '{}' is corrupt (checksum mismatch: truncated or damaged); delete it or "
                            "drop --resume to start over",
                            path));
  }
  TrainState state;
  try {
    std::istringstream body(file.substr(kHeaderLen));
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
    state.info = nlohmann::json::parse(v.toStringRef());
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
