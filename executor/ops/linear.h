#pragma once
// Linear layer out = inp W^T + b. Every product goes through Eigen's GEMM; the plain loops
// beside it (*_reference) are what the tests check the GEMM path against. The backward is split
// in two, as zero-bubble schedules need it (Qi et al. 2023, Sec. 2): the input gradient (B) and
// the weight gradient (W). Both add (+=) into their outputs.
//
// Shape letters: N rows (T*B tokens), C input channels, OC output channels.

namespace meshplan::executor {

/// out (N, OC) = inp (N, C) weight^T + bias; weight (OC, C) row-major as in llm.c; bias (OC) or
/// nullptr.
template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C,
                    int OC);
/// dinp (N, C) += dout (N, OC) weight (OC, C).
template <typename Real>
void linear_backward_input(Real* dinp, const Real* dout, const Real* weight, int N, int C, int OC);
/// dweight (OC, C) += dout^T inp; dbias (OC) += column sums of dout (skipped when nullptr).
template <typename Real>
void linear_backward_weight(Real* dweight, Real* dbias, const Real* dout, const Real* inp, int N,
                            int C, int OC);

/// Plain-loop references of the three above (llm.c's matmul_forward / matmul_backward).
void linear_forward_reference(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC);
void linear_backward_input_reference(float* dinp, const float* dout, const float* weight, int N,
                                     int C, int OC);
void linear_backward_weight_reference(float* dweight, float* dbias, const float* dout,
                                      const float* inp, int N, int C, int OC);

}  // namespace meshplan::executor
