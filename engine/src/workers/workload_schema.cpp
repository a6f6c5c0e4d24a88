#include "workers/workload_schema.h"

#include "data/data_choice.h"
#include "data/lane_data.h"
#include "devicerace/run_settings.h"
#include "devicerace/workload.h"
#include "models/models.h"
#include "train/run_plan.h"
#include "train/trainer.h"

namespace devicerace::detail {

using nlohmann::json;

namespace {

const char* taskName(Task t) {
    switch (t) {
    case Task::Binary: return "binary";
    case Task::LanguageModel: return "language-model";
    case Task::Classify: break;
    }
    return "classify";
}

const char* ruleName(const OptimizerRecipe& r) {
    switch (r.kind) {
    case OptimizerRecipe::Kind::AdamW: return "adamw";
    case OptimizerRecipe::Kind::Sgd: return r.nesterov ? "sgd-nesterov" : "sgd";
    case OptimizerRecipe::Kind::RmsProp: return "rmsprop";
    case OptimizerRecipe::Kind::Adam: break;
    }
    return "adam";
}

json numbers(const std::vector<std::pair<std::string, double>>& named) {
    json j = json::object();
    for (const auto& [key, value] : named) {
        const auto whole = static_cast<std::int64_t>(value);
        j[key] = static_cast<double>(whole) == value ? json(whole) : json(value);
    }
    return j;
}

} // namespace

json workloadSchemaEntry(const std::string& name) {
    const auto& w = findWorkload(name); // counts the parameters; throws for unknown names
    const auto& impl = workloadImpl(name);
    const auto& r = impl.optimizer;
    const auto synthetic = syntheticSize(w.dataset);
    return {{"name", w.name},
            {"description", w.description},
            {"dataset", w.dataset},
            {"input", w.input == DataKind::Tokens ? "tokens" : "images"},
            {"input_shape", w.inputShape},
            {"classes", w.classes},
            {"vocabulary", w.vocabulary},
            {"task", taskName(impl.task)},
            {"synthetic_by_default", w.syntheticByDefault},
            {"synthetic", {{"train", synthetic.train}, {"test", synthetic.test}}},
            {"schedule", w.schedule},
            {"weight_decay", w.weightDecay},
            {"momentum", w.momentum},
            {"lane_keys", w.hasLstm ? json::array({"lstm"}) : json::array()},
            {"origin", w.origin},
            {"optimizer", w.optimizer},
            {"update_rule",
             {{"kind", ruleName(r)},
              {"alpha", r.alpha},
              {"eps", r.eps},
              {"beta2", r.beta2},
              {"decay_matrices_only", r.decayMatricesOnly},
              {"clip_norm", r.clipNorm}}},
            {"network", numbers(impl.network)},
            {"batch", w.defaultBatch},
            {"lr", w.defaultLr},
            {"epochs", w.defaultEpochs},
            {"target_accuracy", w.defaultTarget},
            {"target_loss", w.defaultTargetLoss ? json(*w.defaultTargetLoss) : json(nullptr)},
            {"parameters", w.parameters},
            {"tokens_per_sample", w.tokensPerSample > 0 ? json(w.tokensPerSample) : json(nullptr)},
            {"samples_text", w.samplesText},
            {"channels_last_on_cpu", w.channelsLastOnCpu}};
}

json sharedConstants() {
    return {{"step_buffer", kStepBuffer},
            {"synthetic_pool_bytes", kSyntheticPoolBytes},
            {"divergence_factor", kDivergenceFactor},
            {"max_threads_per_cpu", kMaxThreadsPerCpu},
            {"report_seconds", LaneRunSettings{}.reportIntervalSeconds}};
}

json workloadSchema() {
    json list = json::array();
    for (const auto& w : workloads()) {
        list.push_back(workloadSchemaEntry(w.name));
    }
    return {{"schema", kWorkloadSchemaVersion}, {"constants", sharedConstants()}, {"workloads", std::move(list)}};
}

} // namespace devicerace::detail

namespace devicerace {

std::string workloadSchemaJson() { return detail::workloadSchema().dump(2) + "\n"; }

} // namespace devicerace
