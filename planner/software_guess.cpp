// What a published run that states neither `framework` nor `options` ran: guessed from its
// source text (names and year) and its stated layout, each rule from the software's history.

#include "meshplan/software_guess.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace meshplan::planner {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool names_any(const std::string& lowered_source, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(), [&](std::string_view name) {
    return lowered_source.find(name) != std::string::npos;
  });
}

// Years a source can be dated: the Transformer (2017) on; 2048 and the like are sizes.
constexpr int kFirstYear = 2017;
constexpr int kLastYear = 2039;

// The first year a framework could run ZeRO-2/3 under Megatron-LM: PyTorch FSDP2 support
// (--use-torch-fsdp2, e1993fa6, 2024-11-13) and Megatron-FSDP (d165a854, 2025-02-26).
constexpr int kMegatronShardedYear = 2025;
// Megatron-LM's distributed optimizer (ZeRO 1: --use-distributed-optimizer, 329fe582,
// 2022-02-10): not in the software of a source dated before this year.
constexpr int kMegatronDistributedOptimizerYear = 2022;
// Sequence parallelism and selective recompute (Korthikanti et al. 2022): Megatron-LM
// --sequence-parallel cfd2e216 (2022-04-28) and --recompute-granularity bbab79f8 (2022-05-16);
// microsoft/Megatron-DeepSpeed took them with its upstream merge 9e72d571 (2023-07-04). A source
// is dated about a year after the training it reports, so up to these years it is taken to
// predate them unless it names them.
constexpr int kMegatronLastYearWithoutSp = 2022;
constexpr int kDeepSpeedLastYearWithoutSp = 2023;
// Sources dated from this year on are guessed to run the frameworks' current defaults: flash
// attention (Megatron-LM d693034e, 2022-12-08; PyTorch 2.0 SDPA, 2023-03) and overlapped
// data-parallel communication (Megatron-LM --overlap-grad-reduce 2d5220a4, 2023-08-16;
// --overlap-param-gather f048bf8c, 2023-11-17). A paper is dated about a year after the
// training it reports (GLM-130B: trained 2022, ICLR 2023), so 2023 is still the older set.
constexpr int kCurrentDefaultsYear = 2024;

// Megatron-LM options by era (the set software_options gave every version-1 run before
// frameworks were guessed; its comments give the sources).
PlanOptions megatron_options(bool current, bool megatron_core_named) {
  PlanOptions options;
  options.framework = Framework::kMegatron;
  options.flash_attention = current;
  options.overlap_grad_reduce = current;
  options.overlap_param_gather = current;
  // Megatron-Core's tp-comm overlap (Transformer Engine userbuffers) is off by default
  // (--tp-comm-overlap); the Megatron-LM README's benchmark table turns it on.
  options.overlap_tp_comm = megatron_core_named;
  // Megatron-LM of 2021-22 split pipeline sends by default (its
  // --no-scatter-gather-tensors-in-pipeline turned it off); Megatron-Core runs use sequence
  // parallelism, which shards the sends anyway.
  options.scatter_gather_pipeline = !current;
  // Megatron-Core overlaps interleaved pipeline sends by default since 2023-10 (4eeff55d).
  options.overlap_p2p_comm = current;
  // Megatron-Core runs train in bf16, which reduces gradients in fp32 (arguments.py
  // accumulate_allreduce_grads_in_fp32); 2021-22 Megatron-LM trained in fp16 without
  // --accumulate-allreduce-grads-in-fp32 and reduced in fp16 (examples/sc21/CONFIG.sh).
  options.grad_reduce_dtype = current ? GradReduceDtype::kFp32 : GradReduceDtype::kBf16;
  return options;
}

// DeepSpeed: the pipeline engine partitions activation sends over the tp ranks
// (runtime/pipe/engine.py is_pipe_partitioned = is_model_parallel) and sends blocking; ZeRO's
// overlap_comm defaults to true at stage 3 only (runtime/zero/constants.py at v0.5.0,
// ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT; the 3 stage's prefetch gathers ahead), false
// below; the reduce dtype is the framework's default.
PlanOptions deepspeed_options(bool current, std::optional<int> zero) {
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  options.flash_attention = current;
  options.overlap_grad_reduce = zero == 3;
  options.overlap_param_gather = zero == 3;
  options.overlap_tp_comm = false;
  options.scatter_gather_pipeline = true;
  options.overlap_p2p_comm = false;
  return options;
}

// PyTorch FSDP: prefetching gathers and overlapped reduce-scatters by default (FSDP1
// BackwardPrefetch.BACKWARD_PRE, FSDP2 the same); FSDP2 (fully_shard) from 2024 and in
// torchtitan, FSDP1 before and under Composer, whose FSDP is FSDP1's FullyShardedDataParallel.
// llm-foundry and torchtitan postdate flash attention and ship it (llm-foundry's README: "our
// models use Flash Attention"; torchtitan's attention is SDPA), whatever the source's date.
PlanOptions fsdp_options(bool current, bool composer_named, bool torchtitan_named) {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.flash_attention = current || composer_named || torchtitan_named;
  options.fsdp_version = (current || torchtitan_named) && !composer_named ? 2 : 1;
  return options;
}

// torchtitan's defaults by the source's year, from its history (pytorch/torchtitan):
// - torch.compile named: the blocks compiled (apply_compile); the loss too only from bbb1b616e
//   (2025-04-02, components/loss.py build_cross_entropy_loss), eager before (9dec370 train.py);
// - AsyncTP named: experimental.enable_async_tensor_parallel, costed as tp-comm overlap;
// - dated 2024: torch.optim.AdamW with foreach=True (train.py; fused became the default with
//   6e4988550, 2025-02-24); the embedding, final norm and output in the root's FSDP unit (their
//   own units only from 83e694105, 2025-07-28); and, uncompiled, the hand-written RMSNorm
//   (norms.py RMSNorm, one kernel per op) of the train configs' norm_type "rmsnorm": the 70B
//   and 405B configs throughout, the 8B config from 5e84866e3 (2024-05-02; "fused_rmsnorm"
//   for its first two weeks), until norm_type gave way to nn.RMSNorm in 5078e92e4 (2025-04-17).
//   Only for RMSNorm models (check_norm_kernel_model). Later sources keep the defaults: torch's
//   own RMSNorm kernel count in eager is not sourced here.
void apply_torchtitan_history(PlanOptions& options, const std::string& lowered_source, int year,
                              bool rmsnorm) {
  options.compile = names_any(lowered_source, {"compile"});
  options.compile_loss = year == 0 || year >= 2025;
  options.overlap_tp_comm =
      names_any(lowered_source, {"asynctp", "async tp", "async tensor parallel"});
  if (year != 2024) {
    return;
  }
  options.optimizer_impl = OptimizerImpl::kForeach;
  options.fsdp_head_in_root = true;
  if (!options.compile && rmsnorm) {
    options.norm_kernel = NormKernel::kEager;
  }
}

// The era limits of a candidate (SearchLimits), from the source's year (0: undated, no limit).
SearchLimits era_limits(Framework framework, int year, bool names_sp_or_selective,
                        bool megatron_core_named) {
  SearchLimits limits;
  if (year == 0 || framework == Framework::kFsdp) {
    return limits;
  }
  if (framework == Framework::kMegatron && !megatron_core_named) {
    if (year < kMegatronDistributedOptimizerYear) {
      limits.max_zero = 0;
    } else if (year < kMegatronShardedYear) {
      limits.max_zero = 1;
    }
  }
  const int last_year_without =
      framework == Framework::kDeepSpeed ? kDeepSpeedLastYearWithoutSp : kMegatronLastYearWithoutSp;
  if (year <= last_year_without && !names_sp_or_selective &&
      !(framework == Framework::kMegatron && megatron_core_named)) {
    limits.sequence_parallel = false;
    limits.selective_recompute = false;
  }
  return limits;
}

// The limits in words, for validate's footnote ("" when there are none).
std::string describe_limits(const SearchLimits& limits) {
  std::vector<std::string> parts;
  if (limits.max_zero) {
    parts.push_back(fmt::format("ZeRO {} at most", *limits.max_zero));
  }
  if (!limits.sequence_parallel) {
    parts.push_back("no sequence parallelism or selective recompute");
  }
  if (parts.empty()) {
    return "";
  }
  return fmt::format("; searched fields within its era: {}", fmt::join(parts, ", "));
}

// The guessed options that move the cost, in words, for validate's footnote.
std::string describe_guessed_options(const PlanOptions& options) {
  std::vector<std::string> parts;
  parts.push_back(options.flash_attention ? "flash attention" : "no flash attention");
  parts.push_back(options.overlap_grad_reduce ? "overlapped dp communication"
                                              : "dp communication after the backward");
  if (options.overlap_tp_comm) {
    parts.push_back("tp-comm overlap");
  }
  if (options.scatter_gather_pipeline) {
    parts.push_back("scatter/gather pipeline sends");
  }
  if (options.overlap_p2p_comm) {
    parts.push_back("overlapped pipeline sends");
  }
  if (options.framework == Framework::kFsdp) {
    parts.push_back(fmt::format("FSDP{}", options.fsdp_version));
  }
  if (options.compile) {
    parts.push_back(options.compile_loss ? "torch.compile (blocks and loss)"
                                         : "torch.compile (blocks)");
  }
  if (options.optimizer_impl == OptimizerImpl::kForeach) {
    parts.push_back("foreach AdamW");
  }
  if (options.fsdp_head_in_root.value_or(false) && options.fsdp_version == 2) {
    parts.push_back("embedding and head in the root unit");
  }
  if (options.norm_kernel == NormKernel::kEager) {
    parts.push_back("eager RMSNorm");
  }
  if (options.grad_reduce_dtype) {
    parts.push_back(*options.grad_reduce_dtype == GradReduceDtype::kFp32
                        ? "fp32 gradient reduce"
                        : "16-bit gradient reduce");
  }
  if (options.cross_entropy_loss_fusion == CrossEntropyFusion::kXentropy) {
    parts.push_back("xentropy loss");
  }
  if (options.gemm_precision == GemmPrecision::kFp8) {
    parts.push_back("FP8 GEMMs (named)");
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

int source_year(std::string_view source) {
  const auto digit = [&](size_t i) {
    return i < source.size() && std::isdigit(static_cast<unsigned char>(source[i]));
  };
  for (size_t i = 0; i + 4 <= source.size(); ++i) {
    if (!digit(i) || !digit(i + 1) || !digit(i + 2) || !digit(i + 3) || (i > 0 && digit(i - 1)) ||
        digit(i + 4)) {
      continue;
    }
    // An arXiv identifier (2205.05198) or a decimal is not a year.
    const bool decimal = (i + 5 < source.size() && source[i + 4] == '.' && digit(i + 5)) ||
                         (i > 0 && source[i - 1] == '.');
    const int number = std::stoi(std::string(source.substr(i, 4)));
    if (!decimal && number >= kFirstYear && number <= kLastYear) {
      return number;
    }
  }
  return 0;
}

std::vector<SoftwareGuess> guess_software(const std::string& source, const StatedLayout& layout,
                                          bool gpu_has_fp8) {
  const std::string text = lower(source);
  const int year = source_year(source);
  const bool megatron_core_named =
      names_any(text, {"megatron-core", "nemo", "megatron-bridge", "megatron-fsdp"});
  const bool current = megatron_core_named || year >= kCurrentDefaultsYear;
  const std::string dated = year > 0 ? fmt::format("dated {}", year) : "no year";
  const std::string era = dated + (megatron_core_named ? ", Megatron-Core named" : "") +
                          (current ? ": current defaults" : ": 2021-22 defaults");

  const bool composer_named = names_any(text, {"llm-foundry", "composer", "mosaicml"});
  const bool torchtitan_named = names_any(text, {"torchtitan"});
  const bool fsdp_named =
      composer_named || torchtitan_named || names_any(text, {"fsdp", "fullyshardeddataparallel"});
  const bool deepspeed_named = names_any(text, {"deepspeed", "deeperspeed", "gpt-neox"});
  // FP8 named and runnable: Transformer Engine under Megatron-LM, torchao Float8 under FSDP.
  const bool fp8 = gpu_has_fp8 && names_any(text, {"fp8", "float8"});

  const bool names_sp_or_selective =
      names_any(text, {"sequence parallel", "sequence-parallel", "selective",
                       "activation recomputation", "korthikanti"});

  std::vector<SoftwareGuess> guesses;
  const auto add = [&](PlanOptions options, const std::string& why) {
    // FSDP's options do not follow the Megatron-LM eras (fsdp_options): the date alone.
    const std::string& when = options.framework == Framework::kFsdp ? dated : era;
    SearchLimits limits =
        era_limits(options.framework, year, names_sp_or_selective, megatron_core_named);
    if (layout.zero) {
      limits.max_zero.reset();  // a stated stage is kept: no limit to apply or to report
    }
    guesses.push_back({options,
                       fmt::format("{} ({}; {}): {}{}", to_string(options.framework), why, when,
                                   describe_guessed_options(options), describe_limits(limits)),
                       limits});
  };
  if (!megatron_core_named && fsdp_named) {
    PlanOptions fsdp = fsdp_options(current, composer_named, torchtitan_named);
    if (fp8 && fsdp.fsdp_version == 2) {  // torchao's float8 all-gather is FSDP2's
      fsdp.gemm_precision = GemmPrecision::kFp8;
    }
    if (torchtitan_named && !composer_named) {
      apply_torchtitan_history(fsdp, text, year, layout.rmsnorm);
    }
    if (names_any(text, {"llm-foundry"})) {
      // llm-foundry's default loss_fn, fused_crossentropy (llmfoundry/models/mpt/modeling_mpt.py
      // at v0.3.0): FlashAttention's xentropy loss.
      fsdp.cross_entropy_loss_fusion = CrossEntropyFusion::kXentropy;
    }
    add(fsdp, composer_named ? "llm-foundry/Composer named" : "FSDP or torchtitan named");
  } else if (!megatron_core_named && deepspeed_named) {
    add(deepspeed_options(current, layout.zero), "DeepSpeed named");
  } else if (!megatron_core_named && layout.zero >= 2 && year < kMegatronShardedYear) {
    // A ZeRO-2/3 run of an older Megatron-LM paper ran DeepSpeed's ZeRO ("ZeRO" is its name).
    add(deepspeed_options(current, layout.zero),
        fmt::format("ZeRO {} before Megatron-LM sharded gradients ({})", *layout.zero,
                    kMegatronShardedYear));
  }
  PlanOptions megatron = megatron_options(current, megatron_core_named);
  std::string why = guesses.empty() ? "the default" : "fallback";
  if (layout.pp == 2 && layout.schedule == ScheduleKind::kInterleaved) {
    // Megatron-LM runs the interleaved schedule at pp 2 only with --overlap-p2p-communication
    // (training/arguments.py validate_args since 3ee489d9; refused outright before).
    megatron.overlap_p2p_comm = true;
    why += ", interleaved at pp 2 needs overlap_p2p_comm";
  }
  if (layout.zero >= 2) {
    // Stated ZeRO 2-3 under Megatron-LM is Megatron-FSDP, whose main grads are its own (bf16 by
    // default, megatron_fsdp_main_grads_dtype "auto"): the framework's default reduce dtype, not
    // DDP's fp32 (which check_grad_reduce_dtype refuses there).
    megatron.grad_reduce_dtype.reset();
    why += fmt::format(", ZeRO {} as Megatron-FSDP", *layout.zero);
  } else if ((fp8 && names_any(text, {"nemo"})) ||
             (names_any(text, {"megatron-bridge"}) && names_any(text, {"performance"}))) {
    // NVIDIA's performance runs reduce gradients in bf16: the NeMo-Framework-Launcher 24.07 H100
    // FP8 examples (examples/training/*/h100/*_fp8.sh at 8325688d) pass
    // +training.model.optim.grad_sync_dtype=bf16, and Megatron-Bridge's performance scripts
    // (scripts/performance/llama3_llm_pretrain.py) set grad_reduce_in_fp32 false.
    megatron.grad_reduce_dtype = GradReduceDtype::kBf16;
    why += ", NVIDIA's performance recipes reduce in bf16";
  }
  if (fp8) {
    megatron.gemm_precision = GemmPrecision::kFp8;
  }
  add(megatron, why);
  return guesses;
}

}  // namespace meshplan::planner
