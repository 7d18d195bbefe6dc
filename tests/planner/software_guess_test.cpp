// guess_software (planner/software_guess.cpp): the framework and options a published run that
// states neither is costed with, from its source text and stated layout; and validate's use of
// the candidates (a refused guess gives way to Megatron-LM).

#include "meshplan/software_guess.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "meshplan/json_io.h"
#include "meshplan/validation.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

TEST_CASE("source_year: the first plausible year, not an arXiv id, a size or a decimal") {
  CHECK(source_year("Narayanan et al. 2021, Efficient Large-Scale ... (SC21), Table 1") == 2021);
  CHECK(source_year("Korthikanti et al. 2022 (arXiv 2205.05198), Tables 3 and 5") == 2022);
  CHECK(source_year("GPT-3 (arXiv 2005.14165)") == 0);
  CHECK(source_year("torchtitan docs as of commit 1ea476e9f (2024-04-24)") == 2024);
  CHECK(source_year("seq 2048 on 1024 GPUs") == 0);
  CHECK(source_year("NeMo 24.07 container") == 0);
  CHECK(source_year("v2023.1 release") == 0);
  CHECK(source_year("12023 steps, then 2023") == 2023);
}

TEST_CASE("guess_software: a Megatron-LM paper of 2021-22 gets the 2021-22 set") {
  const std::vector<SoftwareGuess> guesses =
      guess_software("Narayanan et al. 2021, ... Using Megatron-LM (SC21), Table 1", {}, false);
  REQUIRE(guesses.size() == 1);
  const PlanOptions& options = guesses[0].options;
  CHECK(options.framework == Framework::kMegatron);
  CHECK_FALSE(options.flash_attention);
  CHECK_FALSE(options.overlap_grad_reduce);
  CHECK_FALSE(options.overlap_param_gather);
  CHECK_FALSE(options.overlap_tp_comm);
  CHECK_FALSE(options.overlap_p2p_comm);
  CHECK(options.scatter_gather_pipeline);
  CHECK(options.grad_reduce_dtype == GradReduceDtype::kBf16);
  CHECK(options.gemm_precision == GemmPrecision::kBf16);
  CHECK(guesses[0].basis ==
        "megatron (the default; dated 2021: 2021-22 defaults): no flash attention, dp "
        "communication after the backward, scatter/gather pipeline sends, 16-bit gradient reduce; "
        "searched fields within its era: ZeRO 0 at most, no sequence parallelism or selective "
        "recompute");
  // A source with no year is read as the older set too (the behaviour of version-1 files).
  CHECK(guess_software("some paper", {}, false)[0].options == options);
}

TEST_CASE("guess_software: dated 2024 on, or Megatron-Core named, the current defaults") {
  const PlanOptions dated = guess_software("Someone et al. 2024, a 175B run", {}, false)[0].options;
  CHECK(dated.framework == Framework::kMegatron);
  CHECK(dated.flash_attention);
  CHECK(dated.overlap_grad_reduce);
  CHECK(dated.overlap_param_gather);
  CHECK(dated.overlap_p2p_comm);
  CHECK_FALSE(dated.scatter_gather_pipeline);
  CHECK(dated.grad_reduce_dtype == GradReduceDtype::kFp32);
  CHECK_FALSE(dated.overlap_tp_comm);  // --tp-comm-overlap is off unless Megatron-Core's table
  const PlanOptions core =
      guess_software("NVIDIA NeMo (Megatron-Core) table", {}, false)[0].options;
  CHECK(core.overlap_tp_comm);
  CHECK(core.flash_attention);
  // 2023 is still the older set: papers are dated about a year after their training.
  CHECK_FALSE(guess_software("Zeng et al. 2023, GLM-130B", {}, false)[0].options.flash_attention);
}

TEST_CASE("guess_software: DeepSpeed named, then Megatron-LM as the fallback") {
  const StatedLayout zero1{35, ScheduleKind::kOneFOneB, 1};
  const std::vector<SoftwareGuess> guesses =
      guess_software("Smith et al. 2022, Using DeepSpeed and Megatron to Train ...", zero1, false);
  REQUIRE(guesses.size() == 2);
  CHECK(guesses[0].options.framework == Framework::kDeepSpeed);
  CHECK(guesses[0].basis.starts_with("deepspeed (DeepSpeed named; dated 2022: 2021-22 defaults)"));
  CHECK_FALSE(guesses[0].options.flash_attention);
  CHECK_FALSE(guesses[0].options.overlap_grad_reduce);  // overlap_comm is off below ZeRO 3
  CHECK(guesses[0].options.scatter_gather_pipeline);
  CHECK_FALSE(guesses[0].options.grad_reduce_dtype.has_value());  // DeepSpeed's default
  CHECK(guesses[1].options.framework == Framework::kMegatron);
  CHECK(guesses[1].basis.starts_with("megatron (fallback; dated 2022"));
  // ZeRO 3's overlap_comm defaults to true (DeepSpeed v0.5.0 zero/constants.py).
  const StatedLayout zero3{1, std::nullopt, 3};
  const PlanOptions stage3 = guess_software("GPT-NeoX run", zero3, false)[0].options;
  CHECK(stage3.framework == Framework::kDeepSpeed);
  CHECK(stage3.overlap_grad_reduce);
  CHECK(stage3.overlap_param_gather);
}

TEST_CASE("guess_software: ZeRO 2-3 in a Megatron-LM paper before 2025 ran DeepSpeed") {
  const StatedLayout zero3{1, std::nullopt, 3};
  const std::vector<SoftwareGuess> old = guess_software("A et al. 2021, Table 2", zero3, false);
  REQUIRE(old.size() == 2);
  CHECK(old[0].options.framework == Framework::kDeepSpeed);
  CHECK(old[0].basis.starts_with("deepspeed (ZeRO 3 before Megatron-LM sharded gradients (2025)"));
  // From 2025 Megatron-LM runs ZeRO 3 itself (Megatron-FSDP): no DeepSpeed candidate.
  const std::vector<SoftwareGuess> recent = guess_software("A et al. 2025", zero3, false);
  REQUIRE(recent.size() == 1);
  CHECK(recent[0].options.framework == Framework::kMegatron);
  // ZeRO 1 is Megatron-LM's distributed optimizer (2022): no DeepSpeed candidate either.
  CHECK(guess_software("A et al. 2022", {1, std::nullopt, 1}, false).size() == 1);
}

TEST_CASE("guess_software: FSDP frameworks, FP8 and interleaving at pp 2") {
  const PlanOptions titan =
      guess_software("pytorch/torchtitan docs/performance.md (2024-04-24)", {}, false)[0].options;
  CHECK(titan.framework == Framework::kFsdp);
  CHECK(titan.fsdp_version == 2);
  CHECK(titan.flash_attention);
  const PlanOptions foundry =
      guess_software("mosaicml/llm-foundry benchmarking README", {}, false)[0].options;
  CHECK(foundry.framework == Framework::kFsdp);
  CHECK(foundry.fsdp_version == 1);  // Composer's FSDP is FSDP1
  CHECK(foundry.flash_attention);    // llm-foundry ships it, whatever the date
  // llm-foundry's default loss_fn fused_crossentropy; Composer alone and torchtitan, their own.
  CHECK(foundry.cross_entropy_loss_fusion == CrossEntropyFusion::kXentropy);
  CHECK(guess_software("MosaicML Composer blog 2023", {}, false)[0]
            .options.cross_entropy_loss_fusion == CrossEntropyFusion::kOff);
  CHECK(titan.cross_entropy_loss_fusion == CrossEntropyFusion::kOff);
  CHECK(guess_software("FSDP paper 2023", {}, false)[0].options.fsdp_version == 1);
  // FP8 is guessed only where the GPU has FP8 tensor cores.
  CHECK(guess_software("NeMo FP8 table", {}, true)[0].options.gemm_precision ==
        GemmPrecision::kFp8);
  CHECK(guess_software("NeMo FP8 table", {}, false)[0].options.gemm_precision ==
        GemmPrecision::kBf16);
  CHECK(guess_software("torchtitan Float8 row", {}, true)[0].options.gemm_precision ==
        GemmPrecision::kFp8);
  // Not under FSDP1, which meshplan refuses with FP8 (torchao's float8 all-gather is FSDP2's).
  CHECK(guess_software("llm-foundry FP8 row", {}, true)[0].options.gemm_precision ==
        GemmPrecision::kBf16);
  // Megatron-LM runs interleaving at pp 2 only with --overlap-p2p-communication.
  const std::vector<SoftwareGuess> pp2 =
      guess_software("A et al. 2021", {2, ScheduleKind::kInterleaved, 0}, false);
  REQUIRE(pp2.size() == 1);
  CHECK(pp2[0].options.overlap_p2p_comm);
  CHECK(pp2[0].basis.find("interleaved at pp 2 needs overlap_p2p_comm") != std::string::npos);
  CHECK_FALSE(guess_software("A et al. 2021", {4, ScheduleKind::kInterleaved, 0}, false)[0]
                  .options.overlap_p2p_comm);
}

TEST_CASE("guess_software: torchtitan's defaults of the source's year") {
  const StatedLayout rmsnorm{std::nullopt, std::nullopt, std::nullopt, true};
  const auto titan = [&](const std::string& source, const StatedLayout& layout) {
    return guess_software(source, layout, true)[0].options;
  };
  // Dated 2024: foreach AdamW, embedding and head in the root's unit, the eager RMSNorm.
  const PlanOptions eager =
      titan("pytorch/torchtitan benchmarks (torchtitan 9dec370 2024-12-26)", rmsnorm);
  CHECK(eager.framework == Framework::kFsdp);
  CHECK(eager.optimizer_impl == OptimizerImpl::kForeach);
  CHECK(eager.fsdp_head_in_root == std::optional<bool>(true));
  CHECK(eager.norm_kernel == NormKernel::kEager);
  CHECK_FALSE(eager.compile);
  CHECK_FALSE(eager.overlap_tp_comm);
  // Not for a LayerNorm model: the eager kernel is torchtitan's RMSNorm.
  CHECK(titan("torchtitan 2024", {}).norm_kernel == NormKernel::kFused);
  // torch.compile named: the blocks compiled, the loss eager in 2024, and the norm fused.
  const PlanOptions compiled =
      titan("torchtitan 2024, Table 4 '2D + torch.compile + Float8'", rmsnorm);
  CHECK(compiled.compile);
  CHECK_FALSE(compiled.compile_loss);
  CHECK_FALSE(loss_compiled(compiled));
  CHECK(compiled.norm_kernel == NormKernel::kFused);
  CHECK(compiled.gemm_precision == GemmPrecision::kFp8);
  CHECK(titan("torchtitan 2024 row '2D + AsyncTP'", rmsnorm).overlap_tp_comm);
  // Dated 2025 (the loss compiled from bbb1b616e, 2025-04-02) or undated: the current defaults.
  const PlanOptions later = titan("torchtitan 2025, torch.compile", rmsnorm);
  CHECK(loss_compiled(later));
  CHECK(later.optimizer_impl == OptimizerImpl::kFused);
  CHECK_FALSE(later.fsdp_head_in_root.has_value());
  CHECK(titan("torchtitan README", rmsnorm).norm_kernel == NormKernel::kFused);
  // Composer, FSDP alone: none of torchtitan's.
  const PlanOptions fsdp = titan("FSDP 2024, torch.compile", rmsnorm);
  CHECK_FALSE(fsdp.compile);
  CHECK(fsdp.optimizer_impl == OptimizerImpl::kFused);
  // Each appears in the footnote.
  const std::string basis =
      guess_software("torchtitan 2024, torch.compile, AsyncTP", rmsnorm, true)[0].basis;
  CHECK(basis.find("torch.compile (blocks), foreach AdamW, embedding and head in the root unit") !=
        std::string::npos);
  CHECK(basis.find("tp-comm overlap") != std::string::npos);
  CHECK(guess_software("torchtitan 2024", rmsnorm, true)[0].basis.find("eager RMSNorm") !=
        std::string::npos);
}

TEST_CASE("validate: a guessed torchtitan run's eager norm follows its model's norm") {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  nlohmann::json& run = json["runs"][0];
  run["source"] = "pytorch/torchtitan fixture, 2024";
  run["layout"]["tp"] = 1;
  run["layout"]["dp"] = 16;
  run["layout"]["zero"] = 3;
  const ValidationReport layernorm = validate_runs(json, "r.json");
  REQUIRE(layernorm.runs[0].predicted.has_value());
  CHECK(layernorm.runs[0].options.framework == Framework::kFsdp);
  CHECK(layernorm.runs[0].options.norm_kernel == NormKernel::kFused);
  run["model"]["norm"] = "rmsnorm";
  const ValidationReport rms = validate_runs(json, "r.json");
  REQUIRE(rms.runs[0].predicted.has_value());
  CHECK(rms.runs[0].options.norm_kernel == NormKernel::kEager);
  // The eager norm moves more bytes: the same run predicted slower.
  CHECK(rms.runs[0].predicted->step_time_s > layernorm.runs[0].predicted->step_time_s);
}

TEST_CASE("validate: a version-1 run is costed with the first guess its framework can run") {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  nlohmann::json& run = json["runs"][0];
  // Interleaved at pp 2 under Megatron-LM: predicted with overlap_p2p_comm (the shared
  // validation file's sc21-t1-39.1b-512gpu states this layout).
  run["layout"]["tp"] = 1;
  run["layout"]["pp"] = 2;
  run["layout"]["dp"] = nullptr;
  run["layout"]["vpp"] = 2;
  run["layout"]["schedule"] = "interleaved";
  run["layout"]["micro_batch"] = 1;
  const ValidationReport pp2 = validate_runs(json, "r.json");
  REQUIRE(pp2.runs[0].predicted.has_value());
  CHECK(pp2.runs[0].options.overlap_p2p_comm);
  CHECK(pp2.runs[0].software_guess.find("interleaved at pp 2") != std::string::npos);
  // DeepSpeed named, but its pipeline engine runs no interleaving: Megatron-LM costs it.
  run["source"] = "fixture run with DeepSpeed named, 2021";
  run["layout"]["pp"] = 4;
  const ValidationReport fallback = validate_runs(json, "r.json");
  REQUIRE(fallback.runs[0].predicted.has_value());
  CHECK(fallback.runs[0].options.framework == Framework::kMegatron);
  CHECK(fallback.runs[0].software_guess.starts_with("megatron (fallback; dated 2021"));
  // The same run at 1F1B runs under DeepSpeed.
  run["layout"]["vpp"] = 1;
  run["layout"]["schedule"] = "1f1b";
  const ValidationReport deepspeed = validate_runs(json, "r.json");
  REQUIRE(deepspeed.runs[0].predicted.has_value());
  CHECK(deepspeed.runs[0].options.framework == Framework::kDeepSpeed);
}

TEST_CASE("guess_software: ZeRO 2-3 under Megatron-LM is Megatron-FSDP, its own reduce dtype") {
  // A 2024 source with ZeRO 2 at pp 16 (Llama 3 405B's layout, validation/candidate_runs.json):
  // DeepSpeed first (ZeRO 2 before 2025), whose pipeline engine refuses it; then Megatron-LM,
  // whose current defaults reduce in fp32, which meshplan models for DDP and the distributed
  // optimizer only. The Megatron candidate leaves the reduce dtype to Megatron-FSDP's default.
  const std::vector<SoftwareGuess> zero2 =
      guess_software("A et al. 2024", {16, ScheduleKind::kInterleaved, 2}, false);
  REQUIRE(zero2.size() == 2);
  CHECK(zero2[0].options.framework == Framework::kDeepSpeed);
  CHECK(zero2[1].options.framework == Framework::kMegatron);
  CHECK_FALSE(zero2[1].options.grad_reduce_dtype.has_value());
  CHECK(zero2[1].basis.find("ZeRO 2 as Megatron-FSDP") != std::string::npos);
  // ZeRO 1 or unstated keeps the era's fp32.
  for (const std::optional<int> zero : {std::optional<int>{1}, std::optional<int>{}}) {
    const std::vector<SoftwareGuess> other =
        guess_software("A et al. 2024", {16, ScheduleKind::kInterleaved, zero}, false);
    CHECK(other.back().options.grad_reduce_dtype == GradReduceDtype::kFp32);
  }
  // validate then predicts such a run (it was refused by both candidates before).
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  nlohmann::json& run = json["runs"][0];
  run["source"] = "fixture run, 2024";
  run["layout"]["tp"] = 2;
  run["layout"]["pp"] = 2;
  run["layout"]["dp"] = 4;
  run["layout"]["zero"] = 2;
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].predicted.has_value());
  CHECK(report.runs[0].options.framework == Framework::kMegatron);
  CHECK(report.runs[0].predicted->layout.zero == 2);
}

TEST_CASE("guess_software: the era limits what the search may pick for unstated fields") {
  // Megatron-LM gained its distributed optimizer in 2022 (329fe582), sequence parallelism and
  // selective recompute in 2022 (cfd2e216, bbab79f8), ZeRO 2-3 in 2025; Megatron-DeepSpeed the
  // two recompute-side features in July 2023 (9e72d571). A source is dated about a year after
  // its training.
  const SearchLimits sc21 = guess_software("Narayanan et al. 2021", {}, false).back().limits;
  CHECK(sc21.max_zero == 0);
  CHECK_FALSE(sc21.sequence_parallel);
  CHECK_FALSE(sc21.selective_recompute);
  // Naming the features (Korthikanti et al. 2022) lifts those two, not the ZeRO limit.
  const SearchLimits korthikanti =
      guess_software("Korthikanti et al. 2022, Reducing Activation Recomputation", {}, false)
          .back()
          .limits;
  CHECK(korthikanti.max_zero == 1);
  CHECK(korthikanti.sequence_parallel);
  CHECK(korthikanti.selective_recompute);
  // 2024: the distributed optimizer, not yet ZeRO 2-3; 2025 on, or undated: no limit.
  CHECK(guess_software("A et al. 2024", {}, false).back().limits == SearchLimits{1, true, true});
  CHECK(guess_software("A et al. 2025", {}, false).back().limits == SearchLimits{});
  // A stated ZeRO stage is kept, so its limit is neither applied nor reported.
  const SoftwareGuess stated_zero =
      guess_software("A et al. 2024", {16, std::nullopt, 2}, false).back();
  CHECK(stated_zero.limits == SearchLimits{});
  CHECK(stated_zero.basis.find("ZeRO 1 at most") == std::string::npos);
  CHECK(guess_software("an undated page", {}, false).back().limits == SearchLimits{});
  // DeepSpeed: ZeRO any stage; sequence parallelism and selective recompute from 2024 sources.
  const std::vector<SoftwareGuess> deepspeed = guess_software("DeepSpeed run, 2023", {}, false);
  REQUIRE(deepspeed.size() == 2);
  CHECK(deepspeed[0].limits == SearchLimits{std::nullopt, false, false});
  CHECK(deepspeed[0].basis.ends_with(
      "; searched fields within its era: no sequence parallelism or selective recompute"));
  CHECK(guess_software("DeepSpeed run, 2024", {}, false)[0].limits == SearchLimits{});
  // FSDP frameworks: none.
  CHECK(guess_software("torchtitan 2021", {}, false)[0].limits == SearchLimits{});
}

TEST_CASE("guess_software: NVIDIA's performance recipes reduce gradients in bf16") {
  // NeMo-Framework-Launcher's H100 FP8 examples (grad_sync_dtype=bf16) and Megatron-Bridge's
  // performance scripts (grad_reduce_in_fp32 false); other current-era Megatron runs keep fp32.
  const std::string nemo =
      "NVIDIA NeMo Framework performance summary, NeMo 24.07 container, FP8 pre-training table";
  CHECK(guess_software(nemo, {}, true).back().options.grad_reduce_dtype == GradReduceDtype::kBf16);
  CHECK(guess_software(nemo, {}, true)
            .back()
            .basis.find("NVIDIA's performance recipes reduce in bf16") != std::string::npos);
  CHECK(guess_software(nemo, {}, false).back().options.grad_reduce_dtype ==
        GradReduceDtype::kFp32);  // no FP8 on the GPU: not the FP8 example
  CHECK(guess_software("NVIDIA Megatron-Bridge performance summary, DGX-H100 table", {}, false)
            .back()
            .options.grad_reduce_dtype == GradReduceDtype::kBf16);
  CHECK(guess_software("Megatron-Core README table, 2024", {}, false)
            .back()
            .options.grad_reduce_dtype == GradReduceDtype::kFp32);
}

TEST_CASE("validate: a guessed 2021 run searches only what its software could run") {
  // runs_small's searched run (every layout field null but dp) dated 2021 under Megatron-LM:
  // no ZeRO, no sequence parallelism, no selective recompute; the same file dated 2025 may pick
  // them, and a stated field is kept whatever the era.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  nlohmann::json& run = json["runs"][1];
  run["source"] = "fixture run, Megatron-LM, 2021";
  const ValidationReport old = validate_runs(json, "r.json");
  REQUIRE(old.runs[1].predicted.has_value());
  const Layout& picked = old.runs[1].predicted->layout;
  CHECK(picked.zero == 0);
  CHECK_FALSE(picked.sequence_parallel);
  CHECK(picked.recompute != Recompute::kSelective);
  CHECK(old.runs[1].software_guess.find("ZeRO 0 at most") != std::string::npos);
  // Stated, kept: sequence parallelism at tp 2 in the same 2021 run.
  run["layout"]["tp"] = 2;
  run["layout"]["sequence_parallel"] = true;
  run["layout"]["zero"] = 1;
  const ValidationReport stated = validate_runs(json, "r.json");
  REQUIRE(stated.runs[1].predicted.has_value());
  CHECK(stated.runs[1].predicted->layout.sequence_parallel);
  CHECK(stated.runs[1].predicted->layout.zero == 1);
}

}  // namespace
}  // namespace meshplan::planner
