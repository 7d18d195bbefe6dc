#pragma once
// Block-wide sum of one float per thread (warp shuffles, then one value per warp through shared
// memory), every thread gets the total. Blocks of at most 1024 threads, a multiple of 32.

namespace meshplan::executor::gpu {

__device__ inline float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

__device__ inline float block_sum(float value) {
  __shared__ float warp_totals[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = warp_sum(value);
  __syncthreads();  // warp_totals may still be read by a previous call
  if (lane == 0) {
    warp_totals[warp] = value;
  }
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  float total = lane < num_warps ? warp_totals[lane] : 0.0f;
  return warp_sum(total);
}

__device__ inline float block_max(float value) {
  __shared__ float warp_maxima[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) {
    warp_maxima[warp] = value;
  }
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  const float maximum = lane < num_warps ? warp_maxima[lane] : -INFINITY;
  return warp_max(maximum);
}

}  // namespace meshplan::executor::gpu
