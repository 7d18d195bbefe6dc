#pragma once
// One model chunk (a virtual pipeline stage) on one rank, for one micro-batch: the embedding if
// it is the first virtual stage, its transformer blocks, and the final norm, LM head and
// vocab-parallel cross-entropy if it is the last. Forward, backward-input (B) and
// backward-weight (W) are separate so the pipeline runner can execute any schedule's op list;
// a schedule without a B/W split runs W right after B, block by block.
//
// Recompute (Korthikanti et al. 2022, Sec. 5): full keeps only each block's input in the
// forward and runs the block's forward again in B; selective (and the flash-attention memory
// plan) drops the attention probabilities and recomputes them in B. With distributed saved
// activations (Megatron-LM --distribute-saved-activations, DeepSpeed partition_activations)
// full recompute keeps only this tp rank's 1/tp of each block input and all-gathers it over tp
// before the block runs again (Megatron-LM tensor_parallel/random.py CheckpointFunction). With
// Layout::recompute_layers (Megatron's --recompute-method block) only the chunk's first
// recompute_layers blocks are recomputed; the others keep their activations. With
// Layout::recompute_group_layers N (Megatron's --recompute-method uniform) the blocks are
// checkpointed in groups of N: only each group's input is kept, and B of the group's last
// block runs the forward of all N again, keeping their activations for the group's backward.
// Selective recompute drops the attention probabilities when Layout::recompute_modules names
// core_attn (the default), and what its other modules name (transformer_layer.h
// drop_module_activations), rebuilt block by block before B.

#include <cstdint>
#include <vector>

#include "meshplan/layout.h"
#include "parameters.h"
#include "transformer_layer.h"

namespace meshplan::executor {

struct HeadActivations {
  Tensor lnf_out, lnf_mean, lnf_rstd;  // (N_local, C), (N_local), (N_local)
  Tensor logits;                       // (N, V): this rank's vocabulary shard
  Tensor maxes, sumexp;                // (N), reduced over tp
  Tensor d_logits;                     // (N, V), kept by B for W
};

/// One micro-batch's state in one chunk, from its forward to its W.
struct ChunkState {
  Buffer<int32_t> tokens;                // (N) input tokens, sequence-first; first virtual stage
  Buffer<int32_t> targets;               // (N) next tokens; last virtual stage
  std::vector<Tensor> residuals;         // [L + 1] of (N_local, C): block inputs, then the output
  std::vector<LayerActivations> layers;  // [L]
  HeadActivations head;
  Tensor d_input;       // (N_local, C) gradient of the chunk's input
  double loss_sum = 0;  // sum of the token losses (last virtual stage)
};

/// How a chunk recomputes: the plan's layout fields and its distributed saved activations.
struct ChunkRecompute {
  planner::Recompute recompute = planner::Recompute::kNone;
  bool distribute_saved_inputs = false;            // PlanOptions::distribute_saved_activations
  int64_t layers = 0;                              // Layout::recompute_layers
  int64_t group_layers = 0;                        // Layout::recompute_group_layers
  uint32_t modules = planner::kRecomputeCoreAttn;  // Layout::recompute_modules

  static ChunkRecompute of(const planner::Layout& layout, bool distribute_saved_activations);
};

class ModelChunk {
 public:
  /// `loss_scale` is d(loss)/d(token loss): 1 / (global_batch * seq_length).
  ModelChunk(const ChunkPlacement& placement, const ChunkWeights& weights, ChunkWeights& grads,
             const ChunkRecompute& recompute, bool flash_attention, float loss_scale);

  const ChunkPlacement& placement() const { return placement_; }

  /// `input` (N_local, C) is the received activation; the first virtual stage reads
  /// state->tokens instead (and `input` is empty). The output is state->residuals.back().
  void forward(ChunkState* state, Tensor input, const RankContext& ctx) const;
  /// Fills state->d_input from `d_output` (N_local, C) (nullptr on the last virtual stage, whose
  /// gradient starts at the loss). With `with_weight`, W of each block runs right after its B.
  void backward_input(ChunkState* state, const float* d_output, bool with_weight,
                      const RankContext& ctx) const;
  /// The weight gradients B left over; releases the state's activations.
  void backward_weight(ChunkState* state, const RankContext& ctx) const;

 private:
  void embedding_forward_(ChunkState* state, const RankContext& ctx) const;
  void embedding_weight_(ChunkState* state, const RankContext& ctx) const;
  void head_forward_(ChunkState* state, const RankContext& ctx) const;
  Tensor head_backward_input_(ChunkState* state, const RankContext& ctx) const;
  void head_weight_(ChunkState* state, const RankContext& ctx) const;

  ChunkPlacement placement_;
  const ChunkWeights& w_;
  ChunkWeights& g_;
  planner::Recompute recompute_;
  // Layers recomputed, the chunk's first ones (planner::recomputed_layer_count: all under full
  // recompute, the first Layout::recompute_layers under Megatron's block method, else none).
  int64_t recomputed_layers_;
  // Blocks per checkpointed group of the recomputed ones (1 unless the uniform method's
  // recompute_group_layers); a group starts at a multiple of it.
  int64_t group_layers_;
  bool distribute_saved_inputs_;  // with full recompute: block inputs kept as 1/tp chunks
  // Under selective recompute: Megatron-Core's --recompute-modules beyond the attention core,
  // dropped after each block's forward and rebuilt before its B (drop_module_activations).
  uint32_t dropped_modules_;
  bool flash_attention_;
  bool save_probabilities_;
  float loss_scale_;
};

}  // namespace meshplan::executor
