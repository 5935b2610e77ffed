// A training run's directory and running state (see run_state.h).
#include "harness/lm/run_state.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/config_changes.h"
#include "common/durable_file.h"
#include "common/error.h"

namespace sb {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Keeps only the records of steps <= `step` (a resumed run rewrites what came after its checkpoint).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded()) continue;  // a line cut short by a crash
    // The end-of-run lines (final evaluation, context lens) are written again by the resumed run.
    const std::string kind = r.value("kind", "");
    if (r.value("step", int64_t{0}) <= step && kind != "final" && kind != "lens") kept += line + '\n';
  }
  in.close();
  write_file_atomic(path, kept);
}

// A run without --resume starts in a directory holding no earlier run, unless --overwrite replaces it (the
// old checkpoint and result go first, so nothing of the old run can be mistaken for the new one).
void start_fresh(const std::string& dir, const std::vector<std::string>& files, bool overwrite) {
  for (const std::string& f : files) {
    std::error_code ec;
    const bool held = fs::exists(f, ec) && (!fs::is_regular_file(f, ec) || fs::file_size(f, ec) > 0);
    if (!held) continue;
    if (!overwrite) {
      throw Error(fmt::format("--out {} already holds a run ({}); pass --resume to continue it, --overwrite to "
                              "replace it, or choose another --out",
                              dir, fs::path(f).filename().string()));
    }
    fs::remove(f, ec);
    if (ec) throw Error(fmt::format("--overwrite: cannot remove '{}': {}", f, ec.message()));
  }
}

std::string no_checkpoint_message(const std::string& path) {
  return fmt::format("--resume: no checkpoint '{}' to resume from (run without --resume first)", path);
}

}  // namespace

const std::vector<std::string> kUntrainedKeys = {"out_dir", "checkpoint_every", "log_every", "profile", "final_eval",
                                                 "lens_bytes"};

RunPaths::RunPaths(const std::string& d)
    : dir(d),
      metrics((fs::path(d) / "metrics.jsonl").string()),
      checkpoint((fs::path(d) / "checkpoint.pt").string()),
      result((fs::path(d) / "result.json").string()) {}

void append_metrics_line(const std::string& path, const json& record) { append_line_durable(path, record.dump()); }

void prepare_run_dir(const TrainConfig& cfg, const RunPaths& paths, std::optional<RunDirLock>& lock) {
  std::error_code ec;
  fs::create_directories(paths.dir, ec);
  if (ec) throw Error(fmt::format("--out: cannot create directory '{}': {}", paths.dir, ec.message()));
  // One writer per run directory, before --resume attaches to a checkpoint or --overwrite replaces anything.
  lock.emplace(paths.dir, "--out");
  if (cfg.resume && !fs::exists(paths.checkpoint)) throw Error(no_checkpoint_message(paths.checkpoint));
  if (!cfg.resume) {
    start_fresh(paths.dir, {paths.metrics, paths.checkpoint, paths.result}, cfg.overwrite);
    write_file_atomic(paths.metrics, "");
  }
}

std::shared_ptr<const CheckpointBody> resumable_checkpoint(const std::string& out_dir, const json& config,
                                                           std::string* why, int64_t* step) {
  const std::string path = RunPaths(out_dir).checkpoint;
  std::error_code ec;
  why->clear();
  if (!fs::is_regular_file(path, ec)) return nullptr;  // nothing to continue, nothing to explain
  try {
    auto body = std::make_shared<const CheckpointBody>(read_checkpoint(path));
    const json saved = body->meta.value("info", json::object()).value("config", json::object());
    const auto changes = config_changes(saved, config, kUntrainedKeys);
    if (!changes.empty()) {
      *why = fmt::format("checkpoint '{}' has other settings: {}", path, describe_changes(changes));
      return nullptr;
    }
    const json at = body->meta.value("step", json());
    if (!at.is_number_unsigned()) throw Error(fmt::format("checkpoint '{}' is damaged (/meta/step)", path));
    if (step) *step = at.get<int64_t>();
    return body;
  } catch (const Error& e) {
    *why = e.what();
    return nullptr;
  }
}

std::shared_ptr<const CheckpointBody> read_resume_checkpoint(const RunPaths& paths) {
  if (!fs::exists(paths.checkpoint)) throw Error(no_checkpoint_message(paths.checkpoint));
  return std::make_shared<const CheckpointBody>(read_checkpoint(paths.checkpoint));
}

void restore_run(const CheckpointBody& body, const RunPaths& paths, const TrainConfig& cfg, const json& config,
                 bool lead, torch::nn::Module& model, torch::optim::AdamW& optimizer, RunProgress& progress,
                 LossScale& loss_scale) {
  const std::string& path = paths.checkpoint;
  TrainState st = restore_checkpoint(body, path, model, optimizer);
  const json saved_config = st.info.value("config", json::object());
  const json saved_model = saved_config.value("model", json::object());
  if (saved_model != config["model"]) {
    throw Error(fmt::format("--resume: checkpoint '{}' was written for a different model: {}", path,
                            describe_changes(config_changes(saved_model, config["model"]))));
  }
  const auto changes = config_changes(saved_config, config, kUntrainedKeys);
  refuse_changes(changes, cfg.allow_changes, "--resume", path);
  progress.config_history = st.info.value("config_changes", json::array());
  if (!changes.empty()) {
    progress.config_history.push_back(
        {{"at_step", st.step}, {"previous", saved_config}, {"changed", changes_json(changes)}});
  }
  progress.step = st.step;
  progress.train_s = st.train_s;
  progress.resumes = st.info.value("resumes", json::array());
  progress.resumes.push_back(progress.step);
  std::istringstream rng_text(st.data_rng);
  rng_text >> progress.rng;
  if (rng_text.fail()) {
    throw Error(fmt::format("checkpoint '{}' is damaged (/meta/data_rng is not a random engine state); delete it or "
                            "drop --resume to start over",
                            path));
  }
  progress.evals = st.info.value("evals", json::array());
  const json running = st.info.value("progress", json::object());
  progress.interval_loss = running.value("interval_loss", 0.0);
  progress.interval_train_s = running.value("interval_train_s", 0.0);
  progress.interval_steps = running.value("interval_steps", int64_t{0});
  const json saved_loss = running.value("last_loss", json(nullptr));
  progress.last_loss = saved_loss.is_number() ? saved_loss.get<double>() : std::numeric_limits<double>::quiet_NaN();
  if (st.info.contains("loss_scale")) loss_scale.restore(st.info["loss_scale"]);
  if (lead) truncate_metrics(paths.metrics, progress.step);
}

void save_run(const RunPaths& paths, const json& config, const RunProgress& progress, const LossScale& loss_scale,
              torch::nn::Module& model, torch::optim::AdamW& optimizer) {
  TrainState st;
  st.step = progress.step;
  st.train_s = progress.train_s;
  std::ostringstream r;
  r << progress.rng;
  st.data_rng = r.str();
  // The progress line's running sums, so the first line after a resume covers the same steps as without it.
  const double last = progress.last_loss;
  st.info = {{"config", config},
             {"evals", progress.evals},
             {"config_changes", progress.config_history},
             {"resumes", progress.resumes},
             {"progress", {{"interval_loss", progress.interval_loss},
                           {"interval_train_s", progress.interval_train_s},
                           {"interval_steps", progress.interval_steps},
                           {"last_loss", std::isfinite(last) ? json(last) : json(nullptr)}}}};
  if (loss_scale.enabled) st.info["loss_scale"] = loss_scale.state();
  save_checkpoint(paths.checkpoint, model, optimizer, st);
}

}  // namespace sb
