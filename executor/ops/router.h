#pragma once
// Mixture-of-experts top-k router and its load-balancing loss, as Megatron-Core's TopKRouter
// with its defaults (megatron/core/transformer/moe/router.py and moe_utils.py
// topk_softmax_with_capacity: score_function "softmax", moe_router_pre_softmax False,
// dropless): each token's k largest logits are chosen and its routing weights are the softmax
// over those k, which equals the softmax over all E renormalised over the chosen k (Mixtral's
// Hugging Face router, norm_topk_prob). The auxiliary loss is Megatron's
// switch_load_balancing_loss_func (Fedus et al. 2022, "Switch Transformers", Sec. 2.2, eq. 4,
// generalised to top-k as GShard):
//   aux = coeff E / (k T^2) sum_e P_e f_e,  P_e = sum_t softmax(logits_t)_e,  f_e = tokens to e,
// T tokens, gradient through P only. The backwards add (+=) into dlogits. Templates on the
// element type (float in the model, double in the finite-difference tests).
//
// Shape letters: N tokens (rows), E experts, K experts per token.

namespace meshplan::executor {

/// probs (N, K) routing weights and experts (N, K) their expert indices, by decreasing logit
/// (ties: the lower expert first); scores (N, E) = softmax over all E (for the auxiliary loss);
/// logits (N, E).
template <typename Real>
void router_forward(Real* probs, int* experts, Real* scores, const Real* logits, int N, int E,
                    int K);

/// dlogits (N, E) += the gradient through the top-k softmax of dprobs (N, K); probs and experts
/// as router_forward gave them.
template <typename Real>
void router_backward(Real* dlogits, const Real* dprobs, const Real* probs, const int* experts,
                     int N, int E, int K);

/// sum_e P_e f_e scale with P_e the column sums of scores (N, E); f (E) token counts; scale =
/// coeff E / (k T^2) times the loss weight of this micro-batch.
template <typename Real>
double load_balancing_loss(const Real* scores, const Real* f, int N, int E, double scale);

/// dlogits (N, E) += the gradient of load_balancing_loss through the full softmax scores.
template <typename Real>
void load_balancing_backward(Real* dlogits, const Real* scores, const Real* f, int N, int E,
                             double scale);

/// Megatron-Core's auxiliary-loss scores under the sigmoid score function (Llama 4's router;
/// moe_utils.py compute_routing_scores_for_aux_loss, d98e8a64): sigmoids (N, E) = sigmoid(logits)
/// and scores (N, E) = sigmoids / (their sum over the E experts + 1e-20).
template <typename Real>
void sigmoid_aux_scores(Real* scores, Real* sigmoids, const Real* logits, int N, int E);

/// dlogits (N, E) += the gradient of load_balancing_loss through sigmoid_aux_scores: with g_e =
/// scale f_e, dz_k = s_k (1 - sigmoid_k) (g_k - sum_e s_e g_e).
template <typename Real>
void load_balancing_backward_sigmoid(Real* dlogits, const Real* scores, const Real* sigmoids,
                                     const Real* f, int N, int E, double scale);

}  // namespace meshplan::executor
