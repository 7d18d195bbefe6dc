#include "model_chunk.h"

#include <algorithm>
#include <cmath>

#include "ops/crossentropy.h"
#include "ops/eigen_maps.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/softcap.h"

namespace meshplan::executor {

namespace {

// This tp rank's 1/tp of a block input (N_local x C floats), as Megatron-LM's
// split_tensor_into_1d_equal_chunks(new_buffer=True): a new tensor of the flat chunk.
Tensor split_saved_input(const RankContext& ctx, const Tensor& whole) {
  const int64_t chunk = whole.size() / ctx.dims.tp;
  Tensor part = ctx.tensor(chunk);
  const float* begin = whole.data() + static_cast<int64_t>(ctx.dims.tp_rank) * chunk;
  std::copy(begin, begin + chunk, part.data());
  return part;
}

// sqrt(h), Gemma's embedding normalizer (transformers GemmaModel.forward: hidden_size ** 0.5 in
// the activations' dtype).
float embedding_scale(const ShardDims& d) {
  return std::sqrt(static_cast<float>(d.model.hidden_size));
}

// The whole block input again, as gather_split_1d_tensor: an all-gather over tp.
Tensor gather_saved_input(const RankContext& ctx, const Tensor& part) {
  Tensor whole = ctx.tensor(part.size() * ctx.dims.tp);
  ctx.groups.all_gather(CommGroup::kTp, whole.data(), part.data(), part.size());
  return whole;
}

}  // namespace

ChunkRecompute ChunkRecompute::of(const planner::Layout& layout,
                                  bool distribute_saved_activations) {
  ChunkRecompute recompute;
  recompute.recompute = layout.recompute;
  recompute.distribute_saved_inputs = distribute_saved_activations;
  recompute.layers = layout.recompute_layers;
  recompute.group_layers = layout.recompute_group_layers;
  recompute.modules = layout.recompute_modules;
  return recompute;
}

ModelChunk::ModelChunk(const ChunkPlacement& placement, const ChunkWeights& weights,
                       ChunkWeights& grads, const ChunkRecompute& recompute, bool flash_attention,
                       float loss_scale)
    : placement_(placement),
      w_(weights),
      g_(grads),
      recompute_(recompute.recompute),
      recomputed_layers_([&] {
        planner::Layout layout;  // the one rule of which layers are recomputed
        layout.recompute = recompute.recompute;
        layout.recompute_layers = recompute.layers;
        return planner::recomputed_layer_count(layout, placement.num_layers);
      }()),
      group_layers_(recompute.group_layers > 1 ? recompute.group_layers : 1),
      distribute_saved_inputs_(recompute.distribute_saved_inputs &&
                               recompute.recompute == planner::Recompute::kFull),
      dropped_modules_(recompute.recompute == planner::Recompute::kSelective
                           ? recompute.modules & ~uint32_t{planner::kRecomputeCoreAttn}
                           : 0),
      flash_attention_(flash_attention),
      // Flash attention (Dao et al. 2022) never stores the s x s probabilities and recomputes
      // them in the backward, as selective recompute of the attention core does.
      save_probabilities_(!flash_attention &&
                          (recompute.recompute == planner::Recompute::kNone ||
                           (recompute.recompute == planner::Recompute::kSelective &&
                            (recompute.modules & planner::kRecomputeCoreAttn) == 0))),
      loss_scale_(loss_scale) {}

void ModelChunk::forward(ChunkState* state, Tensor input, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  const int L = placement_.num_layers;
  state->residuals.resize(static_cast<size_t>(L) + 1);
  state->layers.resize(static_cast<size_t>(L));
  if (placement_.has_embedding) {
    embedding_forward_(state, ctx);
  } else {
    state->residuals[0] = std::move(input);
  }
  for (int l = 0; l < L; l++) {
    // Under Megatron's block method a layer after the chunk's first recompute_layers keeps its
    // activations as without recompute.
    const bool recomputed = l < recomputed_layers_;
    const bool kept_whole = recompute_ == planner::Recompute::kFull && !recomputed;
    state->residuals[l + 1] = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
    layer_forward(state->residuals[l + 1].data(), &state->layers[l], state->residuals[l].data(),
                  w_.layers[l], kept_whole ? !flash_attention_ : save_probabilities_, ctx);
    if (dropped_modules_ != 0) {
      drop_module_activations(&state->layers[l], w_.layers[l], dropped_modules_, ctx);
    }
    if (recomputed) {
      state->layers[l] = LayerActivations{};  // keep only the group's input
      if (l % group_layers_ != 0) {
        state->residuals[l].reset();  // inside a group: rebuilt by the group's recompute
      } else if (distribute_saved_inputs_ && d.tp > 1) {
        state->residuals[l] = split_saved_input(ctx, state->residuals[l]);
      }
    }
  }
  if (placement_.has_head) {
    head_forward_(state, ctx);
  }
}

void ModelChunk::backward_input(ChunkState* state, const float* d_output, bool with_weight,
                                const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  const int64_t rows = static_cast<int64_t>(d.N_local) * d.C;
  Tensor d_current;
  if (placement_.has_head) {
    d_current = head_backward_input_(state, ctx);
    if (with_weight) {
      head_weight_(state, ctx);
    }
  } else {
    d_current = copy_rows(ctx, d_output, d.N_local, d.C);
  }
  for (int l = placement_.num_layers - 1; l >= 0; l--) {
    const bool recomputed = l < recomputed_layers_;
    const int group_first = static_cast<int>(l / group_layers_ * group_layers_);
    const bool group_last =
        l == std::min<int64_t>(group_first + group_layers_, recomputed_layers_) - 1;
    if (recomputed && group_last) {
      if (distribute_saved_inputs_ && d.tp > 1) {
        state->residuals[group_first] = gather_saved_input(ctx, state->residuals[group_first]);
      }
      // Run the group's forwards again from its saved input (their tp collectives included),
      // keeping each block's input and activations for its backward.
      for (int k = group_first; k <= l; k++) {
        Tensor output = ctx.tensor(rows);
        layer_forward(output.data(), &state->layers[k], state->residuals[k].data(), w_.layers[k],
                      save_probabilities_, ctx);
        if (k < l) {
          state->residuals[k + 1] = std::move(output);
        }
      }
    }
    if (dropped_modules_ != 0) {
      recompute_module_activations(&state->layers[l], state->residuals[l].data(), w_.layers[l],
                                   dropped_modules_, ctx);
    }
    Tensor d_previous = ctx.tensor(rows);
    layer_backward_input(d_previous.data(), g_.layers[l], &state->layers[l], d_current.data(),
                         state->residuals[l].data(), w_.layers[l], ctx);
    if (with_weight) {
      layer_backward_weight(g_.layers[l], &state->layers[l], ctx);
    }
    state->residuals[l + 1].reset();
    d_current = std::move(d_previous);
  }
  state->residuals[0].reset();
  state->d_input = std::move(d_current);
  if (with_weight && placement_.has_embedding) {
    embedding_weight_(state, ctx);
  }
}

void ModelChunk::backward_weight(ChunkState* state, const RankContext& ctx) const {
  if (placement_.has_head) {
    head_weight_(state, ctx);
  }
  for (int l = placement_.num_layers - 1; l >= 0; l--) {
    layer_backward_weight(g_.layers[l], &state->layers[l], ctx);
  }
  if (placement_.has_embedding) {
    embedding_weight_(state, ctx);
  }
}

void ModelChunk::embedding_forward_(ChunkState* state, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  // Vocab-parallel lookup: each rank fills the rows of its own tokens, the sum over tp (an
  // all-reduce, or a reduce-scatter onto the sequence shard) is the full embedding.
  Tensor embedded = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  embedding_forward(embedded.data(), state->tokens.data(), w_.wte, d.N, d.C, d.vocab_start, d.V);
  state->residuals[0] = reduce_partial_sums(ctx, std::move(embedded), d.C);
  if (w_.wpe != nullptr) {
    position_forward(state->residuals[0].data(), w_.wpe, d.T_local, d.B, d.C, d.t0);
  }
  if (d.model.scale_embeddings) {  // Gemma: x sqrt(h) (models.h scale_embeddings)
    Tensor& x = state->residuals[0];
    VectorMap<float>(x.data(), x.size()) *= embedding_scale(d);
  }
}

void ModelChunk::embedding_weight_(ChunkState* state, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  if (d.model.scale_embeddings) {  // the forward's last step, undone first
    Tensor& dx = state->d_input;
    VectorMap<float>(dx.data(), dx.size()) *= embedding_scale(d);
  }
  if (g_.wpe != nullptr) {
    position_backward(g_.wpe, state->d_input.data(), d.T_local, d.B, d.C, d.t0);
  }
  // The lookup's rows are spread over the whole sequence: under sequence parallelism the
  // gradient is gathered first (the backward of the forward's reduce-scatter).
  Tensor gathered;
  const float* d_embedded = gather_sequence(ctx, state->d_input.data(), &gathered, d.C);
  embedding_backward(g_.wte, d_embedded, state->tokens.data(), d.N, d.C, d.vocab_start, d.V);
  state->d_input.reset();
  state->tokens.reset();
}

void ModelChunk::head_forward_(ChunkState* state, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  HeadActivations& h = state->head;
  const Tensor& x = state->residuals.back();
  h.lnf_out = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
  h.lnf_rstd = ctx.tensor(d.N_local);
  if (d.model.norm == models::Norm::kLayerNorm) {
    h.lnf_mean = ctx.tensor(d.N_local);
  }
  norm_forward(d.model, h.lnf_out.data(), h.lnf_mean.data(), h.lnf_rstd.data(), x.data(), w_.lnf_w,
               w_.lnf_b, d.N_local, d.C);
  Tensor gathered;
  const float* full = gather_sequence(ctx, h.lnf_out.data(), &gathered, d.C);
  // Column-parallel LM head: logits of this rank's vocabulary shard, never gathered.
  h.logits = ctx.tensor(static_cast<int64_t>(d.N) * d.V);
  linear_forward<float>(h.logits.data(), full, w_.lm_head, nullptr, d.N, d.C, d.V);
  gathered.reset();
  if (d.model.final_logit_softcapping > 0.0) {
    // Gemma 2's final soft-cap, elementwise: each rank caps its vocabulary shard, and the loss
    // below reads the capped logits (kept for the backward as the cap's output).
    softcap_forward(h.logits.data(), static_cast<int64_t>(d.N) * d.V,
                    d.model.final_logit_softcapping);
  }
  h.maxes = ctx.tensor(d.N);
  h.sumexp = ctx.tensor(d.N);
  Tensor target_logits = ctx.tensor(d.N);
  Tensor losses = ctx.tensor(d.N);
  crossentropy_local_max(h.maxes.data(), h.logits.data(), d.N, d.V);
  ctx.groups.all_reduce_max(CommGroup::kTp, h.maxes.data(), d.N);
  crossentropy_local_target_sumexp(target_logits.data(), h.sumexp.data(), h.logits.data(),
                                   h.maxes.data(), state->targets.data(), d.N, d.V, d.vocab_start);
  ctx.groups.all_reduce_sum(CommGroup::kTp, target_logits.data(), d.N);
  ctx.groups.all_reduce_sum(CommGroup::kTp, h.sumexp.data(), d.N);
  crossentropy_forward(losses.data(), h.maxes.data(), target_logits.data(), h.sumexp.data(), d.N);
  double sum = 0;
  for (int n = 0; n < d.N; n++) {
    sum += losses[n];
  }
  state->loss_sum = sum;
}

Tensor ModelChunk::head_backward_input_(ChunkState* state, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  HeadActivations& h = state->head;
  Tensor d_losses = ctx.tensor(d.N);
  std::fill(d_losses.data(), d_losses.data() + d.N, loss_scale_);
  h.d_logits = ctx.tensor(static_cast<int64_t>(d.N) * d.V);
  crossentropy_backward(h.d_logits.data(), d_losses.data(), h.logits.data(), h.maxes.data(),
                        h.sumexp.data(), state->targets.data(), d.N, d.V, d.vocab_start);
  if (d.model.final_logit_softcapping > 0.0) {
    softcap_backward(h.d_logits.data(), h.logits.data(), static_cast<int64_t>(d.N) * d.V,
                     d.model.final_logit_softcapping);
  }
  h.logits.reset();
  h.maxes.reset();
  h.sumexp.reset();
  state->targets.reset();
  Tensor d_x = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_backward_input(d_x.data(), h.d_logits.data(), w_.lm_head, d.N, d.C, d.V);
  d_x = reduce_partial_sums(ctx, std::move(d_x), d.C);
  Tensor d_output = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
  norm_backward(d.model, d_output.data(), g_.lnf_w, g_.lnf_b, d_x.data(),
                state->residuals.back().data(), w_.lnf_w, h.lnf_mean.data(), h.lnf_rstd.data(),
                d.N_local, d.C);
  h.lnf_mean.reset();
  h.lnf_rstd.reset();
  return d_output;
}

void ModelChunk::head_weight_(ChunkState* state, const RankContext& ctx) const {
  const ShardDims& d = ctx.dims;
  HeadActivations& h = state->head;
  Tensor gathered;
  const float* full = gather_sequence(ctx, h.lnf_out.data(), &gathered, d.C);
  linear_backward_weight<float>(g_.lm_head, nullptr, h.d_logits.data(), full, d.N, d.C, d.V);
  h = HeadActivations{};
}

}  // namespace meshplan::executor
