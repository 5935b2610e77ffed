// Training checkpoints: model, optimizer and RNG state as named raw tensors, written atomically and checksummed,
// and read back only after every name, dtype and shape has been checked against the model being restored.
#include "harness/lm/checkpoint.h"

#include <cstring>
#include <sstream>
#include <type_traits>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json_guard.h"
#include "harness/lm/data.h"

namespace sb {

namespace {

// The dtypes checkpoints store, by name; "" for any other.
const char* stored_dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kLong: return "int64";
    case torch::kByte: return "uint8";
    default: return "";
  }
}

// The optimizer's state key for a parameter (a string in LibTorch 1.x, the TensorImpl pointer in 2.x).
template <typename Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // as LibTorch 1.x's c10::guts::to_string (gone in 2.x) writes the pointer
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

void add_tensor(CheckpointWriter& w, const std::string& name, const torch::Tensor& t) {
  const char* dtype = stored_dtype_name(t.scalar_type());
  if (*dtype == '\0') throw Error(fmt::format("checkpoint: tensor '{}' has dtype {}, which checkpoints do not store",
                                              name, c10::toString(t.scalar_type())));
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  w.add(name, dtype, c.sizes().vec(), c.data_ptr(), c.numel() * c.element_size());
}

// The named tensor as a new CPU tensor, after checking it has the dtype and shape of `like`.
torch::Tensor take_tensor(const CheckpointBody& body, const std::string& name, const torch::Tensor& like,
                          const std::string& path) {
  const CheckpointTensor* t = body.find(name);
  if (t == nullptr) {
    throw Error(fmt::format("checkpoint '{}' was written for a different model: it has no tensor '{}'", path, name));
  }
  if (t->dtype != stored_dtype_name(like.scalar_type()) || t->shape != like.sizes().vec()) {
    throw Error(fmt::format("checkpoint '{}' was written for a different model: tensor '{}' is {} {} here {} {}", path,
                            name, t->dtype, fmt::join(t->shape, "x"), stored_dtype_name(like.scalar_type()),
                            fmt::join(like.sizes().vec(), "x")));
  }
  torch::Tensor out = torch::empty(like.sizes(), torch::TensorOptions().dtype(like.scalar_type()));
  if (t->nbytes > 0) std::memcpy(out.data_ptr(), body.bytes(*t), t->nbytes);
  return out;
}

// A metadata field of the expected JSON type, or a damaged-file error naming it.
const nlohmann::json& meta_field(const CheckpointBody& body, const char* key, nlohmann::json::value_t type,
                                 const std::string& path) {
  const auto it = body.meta.find(key);
  const bool ok = it != body.meta.end() &&
                  (it->type() == type || (type == nlohmann::json::value_t::number_float && it->is_number()));
  if (!ok) {
    throw Error(fmt::format("checkpoint '{}' is damaged (/meta/{} is missing or of the wrong type); delete it or "
                            "drop --resume to start over",
                            path, key));
  }
  return *it;
}

}  // namespace

void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                     const TrainState& state) {
  CheckpointWriter w;
  for (const auto& p : model.named_parameters(true)) add_tensor(w, "model/" + p.key(), p.value());
  for (const auto& b : model.named_buffers(true)) add_tensor(w, "model/" + b.key(), b.value());
  nlohmann::json steps = nlohmann::json::object();
  auto& opt_state = optimizer.state();
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& params = optimizer.param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = opt_state.find(state_key(opt_state, params[i]));
      if (it == opt_state.end()) continue;  // never stepped
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      const std::string prefix = fmt::format("optim/{}.{}/", g, i);
      steps[fmt::format("{}.{}", g, i)] = s.step();
      add_tensor(w, prefix + "exp_avg", s.exp_avg());
      add_tensor(w, prefix + "exp_avg_sq", s.exp_avg_sq());
    }
  }
  add_tensor(w, "rng/cpu", torch::globalContext().defaultGenerator(torch::kCPU).get_state());
  const nlohmann::json meta = {{"step", state.step},         {"train_s", state.train_s},
                               {"data_rng", state.data_rng}, {"info", state.info},
                               {"optimizer_steps", steps}};
  write_file_atomic(path, checkpoint_file_bytes(w.finish(meta)));
}

TrainState load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer) {
  return restore_checkpoint(read_checkpoint(path), path, model, optimizer);
}

TrainState restore_checkpoint(const CheckpointBody& body, const std::string& path, torch::nn::Module& model,
                              torch::optim::AdamW& optimizer) {
  using vt = nlohmann::json::value_t;
  TrainState state;
  state.step = meta_field(body, "step", vt::number_unsigned, path).get<int64_t>();
  state.train_s = meta_field(body, "train_s", vt::number_float, path).get<double>();
  state.data_rng = meta_field(body, "data_rng", vt::string, path).get<std::string>();
  state.info = meta_field(body, "info", vt::object, path);
  const nlohmann::json& steps = meta_field(body, "optimizer_steps", vt::object, path);

  // Everything is read and checked into new tensors first; the model and optimizer change only after that.
  size_t expected = 0;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, loaded)
  for (const auto& p : model.named_parameters(true)) {
    copies.emplace_back(p.value(), take_tensor(body, "model/" + p.key(), p.value(), path));
    ++expected;
  }
  for (const auto& b : model.named_buffers(true)) {
    copies.emplace_back(b.value(), take_tensor(body, "model/" + b.key(), b.value(), path));
    ++expected;
  }
  using State = torch::optim::AdamWParamState;
  std::vector<std::pair<torch::Tensor, std::unique_ptr<State>>> opt_states;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& params = optimizer.param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = fmt::format("{}.{}", g, i);
      if (!steps.contains(key)) continue;
      if (!steps[key].is_number_unsigned()) {
        throw Error(fmt::format("checkpoint '{}' is damaged (/meta/optimizer_steps/{} is not a step count)", path, key));
      }
      const std::string prefix = "optim/" + key + "/";
      auto s = std::make_unique<State>();
      s->step(steps[key].get<int64_t>());
      s->exp_avg(take_tensor(body, prefix + "exp_avg", params[i], path).to(params[i].device()));
      s->exp_avg_sq(take_tensor(body, prefix + "exp_avg_sq", params[i], path).to(params[i].device()));
      opt_states.emplace_back(params[i], std::move(s));
      expected += 2;
    }
  }
  const torch::Tensor rng_now = torch::globalContext().defaultGenerator(torch::kCPU).get_state();
  const torch::Tensor rng = take_tensor(body, "rng/cpu", rng_now, path);
  ++expected;
  if (body.tensors.size() != expected) {
    throw Error(fmt::format("checkpoint '{}' was written for a different model: it holds {} tensors, this model and "
                            "optimizer {}",
                            path, body.tensors.size(), expected));
  }

  {
    torch::NoGradGuard no_grad;
    for (auto& [dst, src] : copies) dst.copy_(src);
  }
  auto& opt_state = optimizer.state();
  opt_state.clear();
  for (auto& [param, s] : opt_states) opt_state[state_key(opt_state, param)] = std::move(s);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  try {
    gen.set_state(rng);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw Error(fmt::format("checkpoint '{}' is damaged (its RNG state is refused: {})", path,
                            what.substr(0, what.find('\n'))));
  }
  return state;
}

}  // namespace sb
