// Names of the plan options' enumerations, as the plan file and the CLI spell them, and their
// parsers (an unknown name is an InputError naming the field).

#include <fmt/format.h>

#include <string>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

std::string to_string(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
      return "megatron";
    case Framework::kDeepSpeed:
      return "deepspeed";
    case Framework::kFsdp:
      return "fsdp";
    case Framework::kMeshplan:
      return "meshplan";
  }
  return "unknown";
}

Framework parse_framework(const std::string& text, const std::string& field) {
  for (Framework f :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kFsdp, Framework::kMeshplan}) {
    if (text == to_string(f)) {
      return f;
    }
  }
  throw InputError(
      fmt::format("{}: unsupported framework ({}); supported: megatron, deepspeed, fsdp, meshplan",
                  field, text));
}

std::string to_string(GemmPrecision precision) {
  return precision == GemmPrecision::kFp8 ? "fp8" : "bf16";
}

GemmPrecision parse_gemm_precision(const std::string& text, const std::string& field) {
  if (text == "bf16") {
    return GemmPrecision::kBf16;
  }
  if (text == "fp8") {
    return GemmPrecision::kFp8;
  }
  throw InputError(
      fmt::format("{}: unsupported precision ({}); supported: bf16, fp8", field, text));
}

std::string to_string(GradReduceDtype dtype) {
  return dtype == GradReduceDtype::kFp32 ? "fp32" : "bf16";
}

GradReduceDtype parse_grad_reduce_dtype(const std::string& text, const std::string& field) {
  if (text == "fp32") {
    return GradReduceDtype::kFp32;
  }
  if (text == "bf16") {
    return GradReduceDtype::kBf16;
  }
  throw InputError(fmt::format("{}: unsupported gradient reduce dtype ({}); supported: fp32, bf16",
                               field, text));
}

std::string to_string(Fp8Recipe recipe) {
  return recipe == Fp8Recipe::kTensorwise ? "tensorwise" : "delayed";
}

Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& field) {
  if (text == "delayed") {
    return Fp8Recipe::kDelayed;
  }
  if (text == "tensorwise") {
    return Fp8Recipe::kTensorwise;
  }
  throw InputError(fmt::format(
      "{}: unsupported FP8 recipe ({}); supported: delayed, tensorwise (Megatron-LM's mxfp8 and "
      "blockwise are not modelled)",
      field, text));
}

std::string to_string(MoeDispatcher dispatcher) {
  return dispatcher == MoeDispatcher::kFlex ? "flex" : "alltoall";
}

MoeDispatcher parse_moe_dispatcher(const std::string& text, const std::string& field) {
  if (text == "alltoall") {
    return MoeDispatcher::kAllToAll;
  }
  if (text == "flex") {
    return MoeDispatcher::kFlex;
  }
  throw InputError(fmt::format(
      "{}: unsupported MoE token dispatcher ({}); supported: alltoall, flex", field, text));
}

std::string to_string(NormKernel kernel) {
  return kernel == NormKernel::kEager ? "eager" : "fused";
}

NormKernel parse_norm_kernel(const std::string& text, const std::string& field) {
  if (text == "fused") {
    return NormKernel::kFused;
  }
  if (text == "eager") {
    return NormKernel::kEager;
  }
  throw InputError(
      fmt::format("{}: unsupported norm kernel ({}); supported: fused, eager", field, text));
}

std::string to_string(OptimizerImpl impl) {
  switch (impl) {
    case OptimizerImpl::kFused:
      return "fused";
    case OptimizerImpl::kForeach:
      return "foreach";
    case OptimizerImpl::kForLoop:
      return "for-loop";
    case OptimizerImpl::kComposer:
      return "composer";
  }
  return "fused";
}

OptimizerImpl parse_optimizer_impl(const std::string& text, const std::string& field) {
  for (const OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach,
                                   OptimizerImpl::kForLoop, OptimizerImpl::kComposer}) {
    if (text == to_string(impl)) {
      return impl;
    }
  }
  throw InputError(fmt::format(
      "{}: unsupported optimizer implementation ({}); supported: fused, foreach, for-loop, "
      "composer",
      field, text));
}

}  // namespace meshplan::planner
