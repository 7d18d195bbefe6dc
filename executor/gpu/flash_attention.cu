// Causal grouped-query attention without a stored (T, T) tensor, in the manner of FlashAttention
// (Dao et al. 2022, Alg. 1; backward as FlashAttention-2, Dao 2023, Alg. 2): each query row keeps
// a running maximum m, normaliser l and output accumulator ("online softmax", Milakov and
// Gimelshein 2018), and saves only lse = m + log l. The backward recomputes
// p_ij = exp(s_ij - lse_i) and uses D_i = rowsum(dO_i o O_i):
//   dV_j += p_ij dO_i,  dS_ij = p_ij (dO_i . V_j - D_i),  dQ_i += scale dS_ij K_j,
//   dK_j += scale dS_ij Q_i.
// One block per (query position, sequence x head); each warp takes every kNumWarps-th key and the
// warps' partial results are merged at the end. Head sizes up to kMaxHeadSize. This is the
// correctness-first form (the tests compare it with ops/attention.cpp); a tiled tensor-core
// version is the speed work of issue 13 §4.

#include <stdexcept>

#include "gpu/block_reduce.cuh"
#include "gpu/cuda_check.h"
#include "gpu/kernels.h"

namespace meshplan::executor::gpu {

namespace {

constexpr int kNumWarps = 4;
constexpr int kMaxHeadSize = 256;
constexpr int kChunks = kMaxHeadSize / 32;  // head channels each lane holds

struct RowIndex {
  int t;        // query position
  int b;        // sequence
  int h;        // query head
  int kv;       // kv head it reads (GQA: h / (NH / KVH))
  int row;      // qkv row width (NH + 2 KVH) HS
  int64_t q;    // offset of this query head in qkv
  int64_t out;  // offset of this head in out
};

__device__ RowIndex row_index(int B, int NH, int KVH, int HS) {
  RowIndex r;
  r.t = blockIdx.x;
  r.b = blockIdx.y / NH;
  r.h = blockIdx.y % NH;
  r.kv = r.h / (NH / KVH);
  r.row = (NH + 2 * KVH) * HS;
  r.q = (static_cast<int64_t>(r.t) * B + r.b) * r.row + static_cast<int64_t>(r.h) * HS;
  r.out = (static_cast<int64_t>(r.t) * B + r.b) * NH * HS + static_cast<int64_t>(r.h) * HS;
  return r;
}

// Offset of key (or value, with `head` = NH + KVH + kv) head `head` at position j.
__device__ int64_t head_at(int j, int B, int b, int row, int head, int HS) {
  return (static_cast<int64_t>(j) * B + b) * row + static_cast<int64_t>(head) * HS;
}

// Dot product of a shared-memory row with a global row, summed over the warp (every lane gets it).
__device__ float warp_dot(const float* shared_row, const float* global_row, int HS) {
  float partial = 0.0f;
  for (int c = threadIdx.x % 32; c < HS; c += 32) {
    partial += shared_row[c] * global_row[c];
  }
  return warp_sum(partial);
}

__global__ void forward_kernel(float* out, float* lse, const float* qkv, int T, int B, int NH,
                               int KVH, int HS, float scale) {
  __shared__ float q[kMaxHeadSize];
  __shared__ float warp_m[kNumWarps];
  __shared__ float warp_l[kNumWarps];
  __shared__ float warp_acc[kNumWarps][kMaxHeadSize];
  const RowIndex r = row_index(B, NH, KVH, HS);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int c = threadIdx.x; c < HS; c += blockDim.x) {
    q[c] = qkv[r.q + c];
  }
  __syncthreads();
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kChunks] = {};
  for (int j = warp; j <= r.t; j += kNumWarps) {
    const float s = scale * warp_dot(q, qkv + head_at(j, B, r.b, r.row, NH + r.kv, HS), HS);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float weight = expf(s - m_new);
    const float* v = qkv + head_at(j, B, r.b, r.row, NH + KVH + r.kv, HS);
#pragma unroll
    for (int k = 0; k < kChunks; k++) {
      const int c = lane + 32 * k;
      acc[k] = acc[k] * correction + (c < HS ? weight * v[c] : 0.0f);
    }
    l = l * correction + weight;
    m = m_new;
  }
#pragma unroll
  for (int k = 0; k < kChunks; k++) {
    if (lane + 32 * k < HS) {
      warp_acc[warp][lane + 32 * k] = acc[k];
    }
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < kNumWarps; w++) {
    m_all = fmaxf(m_all, warp_m[w]);
  }
  float l_all = 0.0f;
  for (int w = 0; w < kNumWarps; w++) {
    l_all += warp_l[w] * expf(warp_m[w] - m_all);
  }
  for (int c = threadIdx.x; c < HS; c += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kNumWarps; w++) {
      value += warp_acc[w][c] * expf(warp_m[w] - m_all);
    }
    out[r.out + c] = value / l_all;
  }
  if (threadIdx.x == 0) {
    lse[(static_cast<int64_t>(r.b) * NH + r.h) * T + r.t] = m_all + logf(l_all);
  }
}

// delta (B, NH, T) = rowsum(dout o out) per query row: one block per row, as forward_kernel.
__global__ void delta_kernel(float* delta, const float* dout, const float* out, int T, int B,
                             int NH, int KVH, int HS) {
  const RowIndex r = row_index(B, NH, KVH, HS);
  float partial = 0.0f;
  for (int c = threadIdx.x; c < HS; c += blockDim.x) {
    partial += dout[r.out + c] * out[r.out + c];
  }
  const float total = block_sum(partial);
  if (threadIdx.x == 0) {
    delta[(static_cast<int64_t>(r.b) * NH + r.h) * T + r.t] = total;
  }
}

__global__ void backward_kernel(float* dqkv, const float* delta, const float* dout,
                                const float* lse, const float* qkv, int T, int B, int NH, int KVH,
                                int HS, float scale) {
  __shared__ float q[kMaxHeadSize];
  __shared__ float dy[kMaxHeadSize];
  __shared__ float warp_dq[kNumWarps][kMaxHeadSize];
  const RowIndex r = row_index(B, NH, KVH, HS);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int c = threadIdx.x; c < HS; c += blockDim.x) {
    q[c] = qkv[r.q + c];
    dy[c] = dout[r.out + c];
  }
  __syncthreads();
  const int64_t stat = (static_cast<int64_t>(r.b) * NH + r.h) * T + r.t;
  const float row_lse = lse[stat];
  const float row_delta = delta[stat];
  float dq[kChunks] = {};
  for (int j = warp; j <= r.t; j += kNumWarps) {
    const int64_t k_offset = head_at(j, B, r.b, r.row, NH + r.kv, HS);
    const int64_t v_offset = head_at(j, B, r.b, r.row, NH + KVH + r.kv, HS);
    const float p = expf(scale * warp_dot(q, qkv + k_offset, HS) - row_lse);
    const float ds = p * (warp_dot(dy, qkv + v_offset, HS) - row_delta) * scale;
#pragma unroll
    for (int k = 0; k < kChunks; k++) {
      const int c = lane + 32 * k;
      if (c < HS) {
        dq[k] += ds * qkv[k_offset + c];
        atomicAdd(dqkv + k_offset + c, ds * q[c]);
        atomicAdd(dqkv + v_offset + c, p * dy[c]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kChunks; k++) {
    if (lane + 32 * k < HS) {
      warp_dq[warp][lane + 32 * k] = dq[k];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < HS; c += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kNumWarps; w++) {
      sum += warp_dq[w][c];
    }
    dqkv[r.q + c] += sum;
  }
}

void check_shape(int B, int NH, int KVH, int HS) {
  if (HS > kMaxHeadSize || NH % KVH != 0 || B * NH > 65535) {
    throw std::invalid_argument(
        "flash attention: head size must be <= 256, query heads a multiple of kv heads and "
        "sequences x heads <= 65535");
  }
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, int T, int B, int NH,
                             int KVH, int HS, cudaStream_t stream) {
  check_shape(B, NH, KVH, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  forward_kernel<<<dim3(T, B * NH), 32 * kNumWarps, 0, stream>>>(out, lse, qkv, T, B, NH, KVH, HS,
                                                                 scale);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void flash_attention_backward(float* dqkv, float* delta, const float* dout, const float* out,
                              const float* lse, const float* qkv, int T, int B, int NH, int KVH,
                              int HS, cudaStream_t stream) {
  check_shape(B, NH, KVH, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  delta_kernel<<<dim3(T, B * NH), 32 * kNumWarps, 0, stream>>>(delta, dout, out, T, B, NH, KVH, HS);
  MESHPLAN_CUDA_CHECK_LAUNCH();
  backward_kernel<<<dim3(T, B * NH), 32 * kNumWarps, 0, stream>>>(dqkv, delta, dout, lse, qkv, T, B,
                                                                  NH, KVH, HS, scale);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace meshplan::executor::gpu
