#pragma once
// The parameters one rank holds: every tensor of every model chunk of its pipeline stage, laid
// out in one flat buffer (llm.c's ParameterTensors), so the data-parallel reduction and the
// optimizer see one contiguous array. Gradients use the same layout in a second buffer.
//
// Each tensor knows where its elements sit in the full (unsharded) tensor. Initialisation draws
// element (i) of the full tensor from a counter-based generator keyed by the tensor's name, so a
// shard holds exactly the values the single-rank model holds there: every layout starts from the
// same weights, whatever tp, pp and vpp are.

#include <cstdint>
#include <string>
#include <vector>

#include "shard_dims.h"

namespace meshplan::executor {

/// Seed of the initial weights (fixed: every run of a plan starts from the same model).
inline constexpr uint64_t kInitSeed = 20240601;

enum class Slot {
  kWte,
  kWpe,
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFc1W,
  kFc1B,
  kFc2W,
  kFc2B,
  kLnfW,
  kLnfB,
  kLmHead,
  kRouterW,
  kExpertFc1W,
  kExpertFc2W,
  kSharedFc1W,
  kSharedFc2W,
  kQDownW,
  kQNormW,
  kQUpW,
  kKvDownW,
  kKvNormW,
  kKvUpW,
  kQHeadNormW,
  kKHeadNormW,
  kPostAttnNormW,
  kPostAttnNormB,
  kPostMlpNormW,
  kPostMlpNormB,
  kSinks,
  kRouterB,
  kExpertFc1B,
  kExpertFc2B
};

/// Rows [full_begin, full_begin + count) of the full tensor, placed next in the local shard.
struct RowSegment {
  int64_t full_begin = 0;
  int64_t count = 0;
};

struct ParameterSpec {
  std::string name;  // full-model name, e.g. "layers.3.qkv.weight" (global layer index)
  Slot slot = Slot::kWte;
  int local_layer = -1;          // layer within the chunk, -1 outside the blocks
  int64_t offset = 0;            // first element in the rank's flat buffer
  int64_t size = 0;              // elements on this rank
  int64_t full_cols = 1;         // columns of the full tensor (1 for vectors)
  std::vector<RowSegment> rows;  // the local rows, in order
  int64_t col_begin = 0;  // local columns are [col_begin, col_begin + local_cols) of the full
  int64_t local_cols = 1;
  double init_std = 0;  // > 0: normal(0, init_std); 0: the constant init_value
  float init_value = 0;
  bool tp_replicated = false;  // the same on every tp rank (norms, row-parallel biases, wpe)
  // Replicated, with a gradient partial over tp even without sequence parallelism: the q/k-norm
  // gains, which each tp rank applies to its own heads only (GradientSync all-reduces them).
  bool tp_partial = false;
  bool expert = false;  // a routed expert's: reduced over the expert data parallel group
  // In a block whose attention is windowed (TransformerConfig::is_windowed_layer of its global
  // index); bind_weights hands it to LayerWeights::windowed.
  bool windowed_layer = false;
  // In a block with rotary positions (TransformerConfig::is_rotary_layer of its global index: not
  // a NoPE layer); bind_weights hands it to LayerWeights::rotary.
  bool rotary_layer = true;
  // The rotary base of its block (TransformerConfig::layer_rope_theta of its global index: Gemma
  // 3's local base on a sliding layer); bind_weights hands it to LayerWeights::rope_base.
  double rope_base = models::kDefaultRopeTheta;
  // Its rotary frequencies' scaling (TransformerConfig::layer_rope_scaling of its global index:
  // none on Gemma 3's sliding layers); bind_weights hands it to LayerWeights::rope_scaling.
  models::RopeScaling rope_scaling;

  /// Index in the full tensor (row-major) of local element `i`.
  int64_t full_index(int64_t i) const;
};

/// One block's weights (pointers into the flat buffer; nullptr where the model has none).
struct LayerWeights {
  float* ln1_w = nullptr;  // (C)
  float* ln1_b = nullptr;  // (C), LayerNorm only
  float* qkv_w = nullptr;  // (QKV, C): rows [NH query heads | KVH key heads | KVH value heads]
  float* qkv_b = nullptr;  // (QKV)
  float* q_head_norm_w = nullptr;  // (HS), qk_norm: every query head's RMSNorm gain, replicated
  float* k_head_norm_w = nullptr;  // (HS), qk_norm: every key head's
  float* sinks = nullptr;          // (NH), attention_sinks: this rank's heads' sink logits
  float* proj_w = nullptr;         // (C, NH HS), row-parallel
  float* proj_b = nullptr;         // (C)
  // sandwich_norm (Gemma 2/3): the norms of the attention and MLP outputs before their residual
  // adds (post_attention_layernorm, post_feedforward_layernorm), replicated like ln1 and ln2.
  float* post_attn_norm_w = nullptr;  // (C)
  float* post_attn_norm_b = nullptr;  // (C), LayerNorm only
  float* post_mlp_norm_w = nullptr;   // (C)
  float* post_mlp_norm_b = nullptr;   // (C), LayerNorm only
  float* ln2_w = nullptr;             // (C)
  float* ln2_b = nullptr;             // (C)
  float* fc1_w = nullptr;             // (FC1, C): rows [gate | up] for SwiGLU
  float* fc1_b = nullptr;             // (FC1)
  float* fc2_w = nullptr;             // (C, F), row-parallel
  float* fc2_b = nullptr;             // (C)
  // MoE layer (fc1/fc2 above are then nullptr): the router and this ep rank's experts.
  float* router_w = nullptr;      // (E, C), replicated over ep like every dense weight
  float* router_b = nullptr;      // (E), router_bias (gpt-oss), replicated as the weight
  float* expert_fc1_w = nullptr;  // (E_local, FC1E, C): expert i's rows [gate | up] for SwiGLU
  float* expert_fc1_b = nullptr;  // (E_local, FC1E), mlp_bias
  float* expert_fc2_w = nullptr;  // (E_local, C, FE)
  float* expert_fc2_b = nullptr;  // (E_local, C), mlp_bias
  float* shared_fc1_w = nullptr;  // (FC1S, C): the shared experts as one MLP, [gate | up]
  float* shared_fc2_w = nullptr;  // (C, FS)
  // Multi-head latent attention (mla_attention.h; qkv_w is then nullptr, proj_w is (C, AO)).
  float* q_down_w = nullptr;   // (RQ, C), replicated over tp; nullptr when RQ = 0
  float* q_norm_w = nullptr;   // (RQ), replicated
  float* q_up_w = nullptr;     // (QUP, RQ), or (QUP, C) when RQ = 0: per head [nope | rope]
  float* kv_down_w = nullptr;  // (RKV + DR, C), replicated: rows [latent | rotary key]
  float* kv_norm_w = nullptr;  // (RKV), replicated
  float* kv_up_w = nullptr;    // (KVUP, RKV): per head [key nope | value]
  // The block attends over the sliding window (TransformerConfig::is_windowed_layer), set by
  // bind_weights from the specs: window_tokens(dims, windowed) keys, else full causal attention.
  bool windowed = false;
  // The block applies rotary positions (and qk_l2_norm): false on a NoPE layer of no_rope_freq,
  // set by bind_weights from the specs.
  bool rotary = true;
  // The base its rotary positions turn with (TransformerConfig::layer_rope_theta), set by
  // bind_weights from the specs.
  double rope_base = models::kDefaultRopeTheta;
  // Its frequencies' scaling (TransformerConfig::layer_rope_scaling), set by bind_weights.
  models::RopeScaling rope_scaling;
};

/// One model chunk's weights or gradients.
struct ChunkWeights {
  float* wte = nullptr;  // (V, C), first virtual stage
  float* wpe = nullptr;  // (max positions, C), first virtual stage, learned positions
  std::vector<LayerWeights> layers;
  float* lnf_w = nullptr;    // (C), last virtual stage
  float* lnf_b = nullptr;    // (C)
  float* lm_head = nullptr;  // (V, C), last virtual stage; the wte itself when tied on one rank
};

/// What one model chunk holds: virtual stage v = chunk * pp + stage, and the layers
/// planner::stage_layer_range gives it ([v L, (v + 1) L) with L = num_layers / (pp vpp) for
/// an even split; the stage's own range for an uneven one).
struct ChunkPlacement {
  int virtual_stage = 0;
  int first_layer = 0;  // global index
  int num_layers = 0;
  bool has_embedding = false;  // first virtual stage
  bool has_head = false;       // last virtual stage: final norm, LM head, loss
};

ChunkPlacement chunk_placement(const planner::Plan& plan, int stage, int chunk);

/// All tensors of this rank's chunks, in flat-buffer order (chunk 0 first), the routed experts'
/// (spec.expert) after all the others, so the dense tensors are one prefix of the buffer (the
/// data-parallel buckets') and the experts one suffix (the expert data parallel all-reduce's).
/// Expert tensors are (E FC1E, C) and (E C, FE) in full; this ep rank holds experts
/// [expert0, expert0 + E_local) of them, whole (Megatron-Core experts.py). Tied embeddings
/// share one tensor when the first and last virtual stage are on this rank, and keep a copy on
/// the last stage otherwise (Megatron-LM's embedding group), initialised to the same values.
std::vector<ParameterSpec> stage_parameter_specs(const ShardDims& dims, const planner::Plan& plan,
                                                 int stage, std::vector<int>* chunk_of_spec);

/// Points `weights` (one per chunk) into `flat` following `specs`, and marks each block
/// windowed as its specs say (ParameterSpec::windowed_layer).
void bind_weights(std::vector<ChunkWeights>* weights, float* flat,
                  const std::vector<ParameterSpec>& specs, const std::vector<int>& chunk_of_spec);

/// Fills `flat` with the initial values of every spec (layout-independent, see above).
void initialize_parameters(float* flat, const std::vector<ParameterSpec>& specs, uint64_t seed);

/// The standard normal value the generator gives element `index` of the tensor keyed `key`.
double counter_normal(uint64_t key, uint64_t index);
uint64_t tensor_key(const std::string& name, uint64_t seed);

}  // namespace meshplan::executor
