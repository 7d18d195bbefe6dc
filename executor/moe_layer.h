#pragma once
// The mixture-of-experts MLP of one MoE block on one rank, as Megatron-Core runs it with the
// alltoall token dispatcher (megatron/core/transformer/moe/: router.py TopKRouter,
// token_dispatcher.py MoEAlltoAllTokenDispatcher, experts.py), dropless, tp = 1:
//   x -> router (linear h -> E, with gpt-oss's bias under router_bias; top-k, softmax over the
//        k, the order gpt-oss's GptOssTopKRouter uses too; ops/router.h)
//     -> permute: the N k (token, expert) rows, expert-major (moe_utils.py permute)
//     -> [ep > 1: all-gather of the E token counts over ep; MPI_Alltoallv of the rows to the ep
//        rank holding each expert; sort the received chunks by local expert]
//     -> each local expert's MLP (fc1 -> GELU | gated unit -> fc2, each with its biases under
//        mlp_bias) on its rows
//     -> [unsort; MPI_Alltoallv back] -> combine: out_t = sum over t's k rows of prob * row
//     (+ the shared experts' MLP of x, shared_experts.py, when the model has them).
// The auxiliary load-balancing loss (ops/router.h) uses the micro-batch's token counts summed
// over cp (an all-reduce, Megatron's tp_cp group) and its gradient flows through the router.
// The backward runs the path in reverse (two more all-to-alls). B computes the input gradient;
// W the router's and the experts' weight gradients, from what B kept. Gradients add (+=).
//
// Shape letters: N rows of the micro-batch (T B), C channels, E experts, K per token, R rows
// this rank's experts receive, FE and FC1E the expert's ffn and first-projection columns.

#include <cstdint>
#include <vector>

#include "memory_tracker.h"
#include "parameters.h"
#include "tensor_parallel.h"

namespace meshplan::executor {

struct MoeActivations {
  Tensor scores;  // (N, E) softmax over all experts, for the auxiliary loss
  Tensor probs;   // (N, K) routing weights
  // router_probs_on_input (Llama 4): the block's input (N, C), kept for the gradient of the
  // weight that scales each token before its expert; empty otherwise.
  Tensor token_in;
  Tensor sigmoids;  // (N, E) router_probs_on_input with the auxiliary loss: sigmoid(logits)
  std::vector<int> experts;          // (N, K) chosen experts
  std::vector<float> counts;         // (E) tokens per expert over the micro-batch (cp-summed)
  double aux_loss = 0;               // this rank's part of the load-balancing loss, weighted
  std::vector<int> perm_token;       // (N K) token of each permuted row, expert-major
  std::vector<int> perm_slot;        // (N K) which of the token's K choices the row is
  std::vector<int64_t> send_rows;    // [ep] permuted rows sent to each ep rank
  std::vector<int64_t> recv_rows;    // [ep] rows received from each ep rank
  std::vector<int64_t> expert_rows;  // [E_local] rows of each local expert
  std::vector<int> sorted_row;       // [R] received (source-major) row -> expert-major row
  Tensor expert_in;                  // (R, C) expert-major
  Tensor fc1_out;                    // (R, FC1E)
  Tensor act_out;                    // (R, FE)
  Tensor combined;                   // (N K, C) expert outputs back here, permuted order
  Tensor shared_fc1;                 // (N, FC1S) shared experts
  Tensor shared_act;                 // (N, FS)
  // Kept by B for W.
  Tensor d_expert_out;  // (R, C) expert-major
  Tensor d_fc1;         // (R, FC1E)
  Tensor d_logits;      // (N, E)
  Tensor d_out;         // (N, C) the block's output gradient, for the shared fc2
  Tensor d_shared_fc1;  // (N, FC1S)
  bool active() const { return !probs.empty(); }
};

/// out (N, C) = the MoE MLP of x (N, C); saves acts; counts the router's token counts into
/// ctx.moe (when set).
void moe_forward(float* out, MoeActivations* acts, const float* x, const LayerWeights& w,
                 const RankContext& ctx);

/// Megatron-Core's --recompute-modules moe_act (experts.py: the activation under
/// CheckpointWithoutOutput, d98e8a64): after the forward, drops the routed experts' activation
/// output (R, FE), the second expert GEMM's input.
void moe_drop_activation(MoeActivations* acts);
/// Before B: the routed experts' activation again, from their kept fc1 output.
void moe_recompute_activation(MoeActivations* acts, const RankContext& ctx);

/// Megatron-Core's --recompute-modules shared_experts (moe_layer.py shared_experts_compute
/// under tensor_parallel.checkpoint, d98e8a64): after the forward, drops the shared experts'
/// fc1 output and activation; their input x stays (the router's too).
void moe_drop_shared_experts(MoeActivations* acts);
/// Before B: the shared experts' MLP again from x (N, C), the forward's input.
void moe_recompute_shared_experts(MoeActivations* acts, const float* x, const LayerWeights& w,
                                  const RankContext& ctx);

/// dx (N, C) += from dout (N, C); adds the layer's load-balancing loss to ctx.moe; keeps what
/// W needs.
void moe_backward_input(float* dx, MoeActivations* acts, const float* dout, const LayerWeights& w,
                        const RankContext& ctx);

/// grads' router and expert weights += from what B kept; x (N, C) is the forward's input.
void moe_backward_weight(LayerWeights& grads, MoeActivations* acts, const float* x,
                         const RankContext& ctx);

}  // namespace meshplan::executor
