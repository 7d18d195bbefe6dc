#include "parameters.h"

#include <fmt/format.h>

#include <cmath>

#include "splitmix64.h"

namespace meshplan::executor {

namespace {

double to_unit_open(uint64_t bits) {
  // 53 random bits into (0, 1): never 0, so log() below is finite.
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// GPT-2 initialisation (Radford et al. 2019, Sec. 2.3; llm.c): normal(0, 0.02) weights, the
// residual projections scaled by 1/sqrt(2 l), norms 1, biases 0.
constexpr double kInitStd = 0.02;
// Attention sinks' initial logits (see add_attention).
constexpr double kSinkInitStd = 1.0;

class SpecBuilder {
 public:
  SpecBuilder(std::vector<ParameterSpec>* specs, std::vector<int>* chunk_of, int chunk)
      : specs_(specs), chunk_of_(chunk_of), chunk_(chunk) {}

  // A tensor whose local rows are `rows` of a full tensor with `full_cols` columns, all columns.
  ParameterSpec& rows(std::string name, Slot slot, int layer, std::vector<RowSegment> segments,
                      int64_t full_cols) {
    ParameterSpec spec;
    spec.name = std::move(name);
    spec.slot = slot;
    spec.local_layer = layer;
    spec.full_cols = full_cols;
    spec.local_cols = full_cols;
    int64_t local_rows = 0;
    for (const RowSegment& segment : segments) {
      local_rows += segment.count;
    }
    spec.rows = std::move(segments);
    spec.size = local_rows * full_cols;
    return push(std::move(spec));
  }
  // A (full_rows, full_cols) tensor whose local part is the column range [begin, begin + cols).
  ParameterSpec& columns(std::string name, Slot slot, int layer, int64_t full_rows,
                         int64_t full_cols, int64_t begin, int64_t cols) {
    ParameterSpec spec;
    spec.name = std::move(name);
    spec.slot = slot;
    spec.local_layer = layer;
    spec.rows = {{0, full_rows}};
    spec.full_cols = full_cols;
    spec.col_begin = begin;
    spec.local_cols = cols;
    spec.size = full_rows * cols;
    return push(std::move(spec));
  }
  // A vector (or table) that every tp rank holds whole.
  ParameterSpec& replicated(std::string name, Slot slot, int layer, int64_t full_rows,
                            int64_t full_cols) {
    ParameterSpec& spec = rows(std::move(name), slot, layer, {{0, full_rows}}, full_cols);
    spec.tp_replicated = true;
    return spec;
  }

 private:
  ParameterSpec& push(ParameterSpec spec) {
    specs_->push_back(std::move(spec));
    chunk_of_->push_back(chunk_);
    return specs_->back();
  }
  std::vector<ParameterSpec>* specs_;
  std::vector<int>* chunk_of_;
  int chunk_;
};

ParameterSpec& normal(ParameterSpec& spec, double std) {
  spec.init_std = std;
  return spec;
}
ParameterSpec& constant(ParameterSpec& spec, float value) {
  spec.init_value = value;
  return spec;
}

void add_norm(SpecBuilder& b, const ShardDims& d, const std::string& prefix, Slot weight_slot,
              Slot bias_slot, int layer) {
  // A gain of 1 at the start: the weight itself, or 0 under (1 + weight) (norm_unit_offset;
  // transformers GemmaRMSNorm initialises its weight to zeros).
  constant(b.replicated(prefix + ".weight", weight_slot, layer, d.C, 1),
           d.model.norm_unit_offset ? 0.0f : 1.0f);
  if (d.model.norm == models::Norm::kLayerNorm) {
    constant(b.replicated(prefix + ".bias", bias_slot, layer, d.C, 1), 0.0f);
  }
}

// Standard (grouped-query) attention.
void add_attention(SpecBuilder& b, const ShardDims& d, const std::string& p, int local_layer,
                   double residual_std) {
  const models::TransformerConfig& m = d.model;
  const int64_t r = d.tp_rank;
  // Column-parallel QKV: this rank's query heads, then its key and value heads.
  const int64_t q_rows = m.num_attention_heads * m.head_dim;
  const int64_t kv_rows = m.num_kv_heads * m.head_dim;
  const std::vector<RowSegment> qkv_rows = {{r * d.NH * d.HS, d.NH * d.HS},
                                            {q_rows + r * d.KVH * d.HS, d.KVH * d.HS},
                                            {q_rows + kv_rows + r * d.KVH * d.HS, d.KVH * d.HS}};
  normal(b.rows(p + ".qkv.weight", Slot::kQkvW, local_layer, qkv_rows, d.C), kInitStd);
  if (m.qkv_bias) {
    constant(b.rows(p + ".qkv.bias", Slot::kQkvB, local_layer, qkv_rows, 1), 0.0f);
  }
  if (m.qk_norm) {
    // One RMSNorm gain of head_dim for all query heads, one for all key heads, whole on every tp
    // rank (Qwen3Attention, Gemma3Attention q_norm and k_norm): 1, or 0 under (1 + weight).
    const float gain = m.norm_unit_offset ? 0.0f : 1.0f;
    constant(b.replicated(p + ".q_head_norm.weight", Slot::kQHeadNormW, local_layer, d.HS, 1), gain)
        .tp_partial = true;
    constant(b.replicated(p + ".k_head_norm.weight", Slot::kKHeadNormW, local_layer, d.HS, 1), gain)
        .tp_partial = true;
  }
  if (m.attention_sinks) {
    // One sink logit per query head, split with the heads (Megatron-Core
    // DotProductAttention.softmax_offset, a / tp per rank). Normal(0, 1): trained gpt-oss sinks
    // are O(1), and distinct per head, so a head reading another head's sink would show.
    normal(b.rows(p + ".sinks", Slot::kSinks, local_layer, {{r * d.NH, d.NH}}, 1), kSinkInitStd);
  }
  // Row-parallel attention output projection (C, a d): this rank's columns.
  normal(b.columns(p + ".proj.weight", Slot::kProjW, local_layer, d.C, q_rows, r * d.NH * d.HS,
                   d.NH * d.HS),
         residual_std);
  if (m.attention_output_bias) {
    constant(b.replicated(p + ".proj.bias", Slot::kProjB, local_layer, d.C, 1), 0.0f);
  }
}

// Multi-head latent attention as Megatron-Core's MLASelfAttention.__init__
// (multi_latent_attention.py) builds it: linear_q_down_proj and linear_kv_down_proj (TELinear,
// parallel_mode "duplicated") and the latent norms whole on every tp rank; linear_q_up_proj
// (linear_q_proj when q_lora_rank = 0) and linear_kv_up_proj column-parallel by heads;
// linear_proj row-parallel (C, a DV), this rank's columns.
void add_mla(SpecBuilder& b, const ShardDims& d, const std::string& p, int local_layer,
             double residual_std) {
  const int64_t r = d.tp_rank;
  if (d.RQ > 0) {
    normal(b.replicated(p + ".q_down.weight", Slot::kQDownW, local_layer, d.RQ, d.C), kInitStd);
    constant(b.replicated(p + ".q_norm.weight", Slot::kQNormW, local_layer, d.RQ, 1), 1.0f);
  }
  normal(b.rows(p + (d.RQ > 0 ? ".q_up.weight" : ".q.weight"), Slot::kQUpW, local_layer,
                {{r * d.QUP, d.QUP}}, d.RQ > 0 ? d.RQ : d.C),
         kInitStd);
  normal(b.replicated(p + ".kv_down.weight", Slot::kKvDownW, local_layer, d.RKV + d.DR, d.C),
         kInitStd);
  constant(b.replicated(p + ".kv_norm.weight", Slot::kKvNormW, local_layer, d.RKV, 1), 1.0f);
  normal(b.rows(p + ".kv_up.weight", Slot::kKvUpW, local_layer, {{r * d.KVUP, d.KVUP}}, d.RKV),
         kInitStd);
  normal(b.columns(p + ".proj.weight", Slot::kProjW, local_layer, d.C,
                   d.model.num_attention_heads * d.model.v_head_dim, r * d.AO, d.AO),
         residual_std);
}

void add_layer(SpecBuilder& b, const ShardDims& d, int global_layer, int local_layer) {
  const models::TransformerConfig& m = d.model;
  const std::string p = fmt::format("layers.{}", global_layer);
  const int64_t r = d.tp_rank;
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(m.num_layers));
  add_norm(b, d, p + ".ln1", Slot::kLn1W, Slot::kLn1B, local_layer);
  if (m.is_mla()) {
    add_mla(b, d, p, local_layer, residual_std);
  } else {
    add_attention(b, d, p, local_layer, residual_std);
  }
  if (m.sandwich_norm) {
    add_norm(b, d, p + ".post_attn_norm", Slot::kPostAttnNormW, Slot::kPostAttnNormB, local_layer);
  }
  add_norm(b, d, p + ".ln2", Slot::kLn2W, Slot::kLn2B, local_layer);
  if (m.is_moe_layer(global_layer)) {
    // Megatron-Core moe/router.py: the gating linear (E, h), with gpt-oss's bias
    // (GptOssTopKRouter.bias) under router_bias. The experts come after every dense tensor
    // (add_experts).
    normal(b.replicated(p + ".router.weight", Slot::kRouterW, local_layer, d.E, d.C), kInitStd);
    if (m.router_bias) {
      constant(b.replicated(p + ".router.bias", Slot::kRouterB, local_layer, d.E, 1), 0.0f);
    }
    if (m.sandwich_norm) {
      add_norm(b, d, p + ".post_mlp_norm", Slot::kPostMlpNormW, Slot::kPostMlpNormB, local_layer);
    }
    if (d.FS > 0) {
      // shared_experts.py: an ordinary MLP every token goes through (tp 1 here).
      normal(b.rows(p + ".shared_experts.fc1.weight", Slot::kSharedFc1W, local_layer, {{0, d.FC1S}},
                    d.C),
             kInitStd);
      normal(b.rows(p + ".shared_experts.fc2.weight", Slot::kSharedFc2W, local_layer, {{0, d.C}},
                    d.FS),
             residual_std);
    }
    return;
  }
  // Column-parallel first MLP projection: [gate | up] rows for a gated MLP.
  std::vector<RowSegment> fc1_rows = {{r * d.F, d.F}};
  if (models::is_gated(m.activation)) {
    fc1_rows.push_back({m.ffn_hidden_size + r * d.F, d.F});
  }
  normal(b.rows(p + ".fc1.weight", Slot::kFc1W, local_layer, fc1_rows, d.C), kInitStd);
  if (m.mlp_bias) {
    constant(b.rows(p + ".fc1.bias", Slot::kFc1B, local_layer, fc1_rows, 1), 0.0f);
  }
  normal(
      b.columns(p + ".fc2.weight", Slot::kFc2W, local_layer, d.C, m.ffn_hidden_size, r * d.F, d.F),
      residual_std);
  if (m.mlp_bias) {
    constant(b.replicated(p + ".fc2.bias", Slot::kFc2B, local_layer, d.C, 1), 0.0f);
  }
  if (m.sandwich_norm) {
    add_norm(b, d, p + ".post_mlp_norm", Slot::kPostMlpNormW, Slot::kPostMlpNormB, local_layer);
  }
}

// This ep rank's experts of MoE layer `global_layer`: whole experts [expert0, expert0 +
// E_local) of the full (E FC1E, C) and (E C, FE) tensors, initialised as the dense MLP's.
void add_experts(SpecBuilder& b, const ShardDims& d, int global_layer, int local_layer) {
  const std::string p = fmt::format("layers.{}", global_layer);
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(d.model.num_layers));
  ParameterSpec& fc1 =
      normal(b.rows(p + ".experts.fc1.weight", Slot::kExpertFc1W, local_layer,
                    {{static_cast<int64_t>(d.expert0) * d.FC1E, int64_t{d.E_local} * d.FC1E}}, d.C),
             kInitStd);
  fc1.expert = true;
  ParameterSpec& fc2 =
      normal(b.rows(p + ".experts.fc2.weight", Slot::kExpertFc2W, local_layer,
                    {{static_cast<int64_t>(d.expert0) * d.C, int64_t{d.E_local} * d.C}}, d.FE),
             residual_std);
  fc2.expert = true;
  if (d.model.mlp_bias) {
    // Each expert's fc1 and fc2 biases, as a dense MLP's (gpt-oss gate_up_proj_bias,
    // down_proj_bias), the expert's whole.
    constant(b.rows(p + ".experts.fc1.bias", Slot::kExpertFc1B, local_layer,
                    {{static_cast<int64_t>(d.expert0) * d.FC1E, int64_t{d.E_local} * d.FC1E}}, 1),
             0.0f)
        .expert = true;
    constant(b.rows(p + ".experts.fc2.bias", Slot::kExpertFc2B, local_layer,
                    {{static_cast<int64_t>(d.expert0) * d.C, int64_t{d.E_local} * d.C}}, 1),
             0.0f)
        .expert = true;
  }
}

}  // namespace

int64_t ParameterSpec::full_index(int64_t i) const {
  int64_t local_row = i / local_cols;
  const int64_t col = col_begin + i % local_cols;
  for (const RowSegment& segment : rows) {
    if (local_row < segment.count) {
      return (segment.full_begin + local_row) * full_cols + col;
    }
    local_row -= segment.count;
  }
  return -1;  // unreachable for i < size
}

ChunkPlacement chunk_placement(const planner::Plan& plan, int stage, int chunk) {
  const int pp = static_cast<int>(plan.layout.pp);
  const int vpp = static_cast<int>(plan.layout.vpp);
  const planner::LayerRange layers =
      planner::stage_layer_range(plan.model, plan.layout, stage, chunk);
  ChunkPlacement c;
  c.virtual_stage = static_cast<int>(planner::virtual_stage(pp, stage, chunk));
  c.first_layer = static_cast<int>(layers.first);
  c.num_layers = static_cast<int>(layers.count());
  c.has_embedding = c.virtual_stage == 0;
  c.has_head = c.virtual_stage == pp * vpp - 1;
  return c;
}

std::vector<ParameterSpec> stage_parameter_specs(const ShardDims& d, const planner::Plan& plan,
                                                 int stage, std::vector<int>* chunk_of_spec) {
  std::vector<ParameterSpec> specs;
  chunk_of_spec->clear();
  const models::TransformerConfig& m = d.model;
  const std::vector<RowSegment> vocab_rows = {{d.vocab_start, d.V}};
  bool holds_wte = false;
  for (int chunk = 0; chunk < plan.layout.vpp; chunk++) {
    const ChunkPlacement placement = chunk_placement(plan, stage, chunk);
    SpecBuilder b(&specs, chunk_of_spec, chunk);
    if (placement.has_embedding) {
      normal(b.rows("wte.weight", Slot::kWte, -1, vocab_rows, d.C), kInitStd);
      holds_wte = true;
      if (m.positions == models::Positions::kLearned) {
        normal(b.replicated("wpe.weight", Slot::kWpe, -1, m.max_position_embeddings, d.C),
               kInitStd);
      }
    }
    for (int l = 0; l < placement.num_layers; l++) {
      add_layer(b, d, placement.first_layer + l, l);
    }
    if (placement.has_head) {
      add_norm(b, d, "lnf", Slot::kLnfW, Slot::kLnfB, -1);
      if (!m.tied_embeddings) {
        normal(b.rows("lm_head.weight", Slot::kLmHead, -1, vocab_rows, d.C), kInitStd);
      } else if (!holds_wte) {
        // Tied across pipeline stages: the last stage's copy of the word embedding, under the
        // embedding's name, so it starts equal and compares equal.
        normal(b.rows("wte.weight", Slot::kLmHead, -1, vocab_rows, d.C), kInitStd);
      }
    }
  }
  // The routed experts last (see the header).
  for (int chunk = 0; chunk < plan.layout.vpp; chunk++) {
    const ChunkPlacement placement = chunk_placement(plan, stage, chunk);
    SpecBuilder b(&specs, chunk_of_spec, chunk);
    for (int l = 0; l < placement.num_layers; l++) {
      if (m.is_moe_layer(placement.first_layer + l)) {
        add_experts(b, d, placement.first_layer + l, l);
      }
    }
  }
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); i++) {
    ParameterSpec& spec = specs[i];
    spec.offset = offset;
    offset += spec.size;
    if (spec.local_layer >= 0) {
      const ChunkPlacement placement = chunk_placement(plan, stage, (*chunk_of_spec)[i]);
      spec.windowed_layer = m.is_windowed_layer(placement.first_layer + spec.local_layer);
      spec.rotary_layer = m.is_rotary_layer(placement.first_layer + spec.local_layer);
      spec.rope_base = m.layer_rope_theta(placement.first_layer + spec.local_layer);
      spec.rope_scaling = m.layer_rope_scaling(placement.first_layer + spec.local_layer);
    }
  }
  return specs;
}

namespace {

// The pointer of `w` (or of its layer spec.local_layer) that the tensor in `spec.slot` binds.
float** slot_pointer(ChunkWeights& w, const ParameterSpec& spec) {
  LayerWeights* layer = spec.local_layer >= 0 ? &w.layers[spec.local_layer] : nullptr;
  switch (spec.slot) {
    case Slot::kWte:
      return &w.wte;
    case Slot::kWpe:
      return &w.wpe;
    case Slot::kLn1W:
      return &layer->ln1_w;
    case Slot::kLn1B:
      return &layer->ln1_b;
    case Slot::kQkvW:
      return &layer->qkv_w;
    case Slot::kQkvB:
      return &layer->qkv_b;
    case Slot::kProjW:
      return &layer->proj_w;
    case Slot::kProjB:
      return &layer->proj_b;
    case Slot::kLn2W:
      return &layer->ln2_w;
    case Slot::kLn2B:
      return &layer->ln2_b;
    case Slot::kFc1W:
      return &layer->fc1_w;
    case Slot::kFc1B:
      return &layer->fc1_b;
    case Slot::kFc2W:
      return &layer->fc2_w;
    case Slot::kFc2B:
      return &layer->fc2_b;
    case Slot::kLnfW:
      return &w.lnf_w;
    case Slot::kLnfB:
      return &w.lnf_b;
    case Slot::kLmHead:
      return &w.lm_head;
    case Slot::kRouterW:
      return &layer->router_w;
    case Slot::kExpertFc1W:
      return &layer->expert_fc1_w;
    case Slot::kExpertFc2W:
      return &layer->expert_fc2_w;
    case Slot::kSharedFc1W:
      return &layer->shared_fc1_w;
    case Slot::kSharedFc2W:
      return &layer->shared_fc2_w;
    case Slot::kQDownW:
      return &layer->q_down_w;
    case Slot::kQNormW:
      return &layer->q_norm_w;
    case Slot::kQUpW:
      return &layer->q_up_w;
    case Slot::kKvDownW:
      return &layer->kv_down_w;
    case Slot::kKvNormW:
      return &layer->kv_norm_w;
    case Slot::kKvUpW:
      return &layer->kv_up_w;
    case Slot::kQHeadNormW:
      return &layer->q_head_norm_w;
    case Slot::kKHeadNormW:
      return &layer->k_head_norm_w;
    case Slot::kPostAttnNormW:
      return &layer->post_attn_norm_w;
    case Slot::kPostAttnNormB:
      return &layer->post_attn_norm_b;
    case Slot::kPostMlpNormW:
      return &layer->post_mlp_norm_w;
    case Slot::kPostMlpNormB:
      return &layer->post_mlp_norm_b;
    case Slot::kSinks:
      return &layer->sinks;
    case Slot::kRouterB:
      return &layer->router_b;
    case Slot::kExpertFc1B:
      return &layer->expert_fc1_b;
    case Slot::kExpertFc2B:
      return &layer->expert_fc2_b;
  }
  return nullptr;  // unreachable: every slot is listed
}

}  // namespace

void bind_weights(std::vector<ChunkWeights>* weights, float* flat,
                  const std::vector<ParameterSpec>& specs, const std::vector<int>& chunk_of_spec) {
  for (size_t i = 0; i < specs.size(); i++) {
    ChunkWeights& w = (*weights)[static_cast<size_t>(chunk_of_spec[i])];
    *slot_pointer(w, specs[i]) = flat + specs[i].offset;
    if (specs[i].local_layer >= 0) {
      w.layers[static_cast<size_t>(specs[i].local_layer)].windowed = specs[i].windowed_layer;
      w.layers[static_cast<size_t>(specs[i].local_layer)].rotary = specs[i].rotary_layer;
      w.layers[static_cast<size_t>(specs[i].local_layer)].rope_base = specs[i].rope_base;
      w.layers[static_cast<size_t>(specs[i].local_layer)].rope_scaling = specs[i].rope_scaling;
    }
  }
  // Tied on one rank: the head reads (and its gradient adds into) the embedding itself.
  for (ChunkWeights& w : *weights) {
    if (w.lnf_w != nullptr && w.lm_head == nullptr) {
      w.lm_head = (*weights)[0].wte;
    }
  }
}

uint64_t tensor_key(const std::string& name, uint64_t seed) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a 64-bit offset basis
  for (const char c : name) {
    hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ULL;  // FNV-1a 64-bit prime
  }
  return splitmix64(hash ^ splitmix64(seed));
}

double counter_normal(uint64_t key, uint64_t index) {
  // Box-Muller (Box and Muller 1958) on two uniforms drawn at counters 2i and 2i + 1.
  const double u1 = to_unit_open(splitmix64(key + 2 * index));
  const double u2 = to_unit_open(splitmix64(key + 2 * index + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void initialize_parameters(float* flat, const std::vector<ParameterSpec>& specs, uint64_t seed) {
  for (const ParameterSpec& spec : specs) {
    float* p = flat + spec.offset;
    if (spec.init_std == 0) {
      std::fill(p, p + spec.size, spec.init_value);
      continue;
    }
    const uint64_t key = tensor_key(spec.name, seed);
    for (int64_t i = 0; i < spec.size; i++) {
      p[i] = static_cast<float>(spec.init_std *
                                counter_normal(key, static_cast<uint64_t>(spec.full_index(i))));
    }
  }
}

}  // namespace meshplan::executor
