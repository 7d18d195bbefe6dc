#include "context_parallel.h"

#include <algorithm>
#include <cstdint>

#include "ops/cp_attention.h"

namespace meshplan::executor {

namespace {

// Columns of a K/V row: the rank's kv heads of K, then of V (contiguous in a fused qkv row).
int kv_width(const ShardDims& d) {
  return 2 * d.KVH * d.HS;
}

// Copies the (T, B, KV) rows of cp rank `owner` into their sequence positions of full (S, B, KV).
void place_rows(const ShardDims& d, int owner, const float* rows, float* full) {
  const std::vector<int> positions = cp_positions(d.S, d.cp, owner);
  const int64_t width = kv_width(d);
  for (int t = 0; t < d.T; t++) {
    for (int b = 0; b < d.B; b++) {
      std::copy_n(rows + (static_cast<int64_t>(t) * d.B + b) * width, width,
                  full + (static_cast<int64_t>(positions[t]) * d.B + b) * width);
    }
  }
}

// rows (T, B, KV) = the positions of cp rank `owner` taken from full (S, B, KV).
void take_rows(const ShardDims& d, int owner, const float* full, float* rows) {
  const std::vector<int> positions = cp_positions(d.S, d.cp, owner);
  const int64_t width = kv_width(d);
  for (int t = 0; t < d.T; t++) {
    for (int b = 0; b < d.B; b++) {
      std::copy_n(full + (static_cast<int64_t>(positions[t]) * d.B + b) * width, width,
                  rows + (static_cast<int64_t>(t) * d.B + b) * width);
    }
  }
}

// The whole sequence's K/V (S, B, KV): this rank's from qkv, the others' over cp - 1 ring steps
// (step i brings the chunk of cp rank r - i).
Tensor gather_kv(const RankContext& ctx, const float* qkv) {
  const ShardDims& d = ctx.dims;
  const int64_t width = kv_width(d);
  const int64_t count = static_cast<int64_t>(d.N) * width;
  Tensor current = ctx.tensor(count);
  for (int64_t row = 0; row < d.N; row++) {
    std::copy_n(qkv + row * d.QKV + d.NH * d.HS, width, current.data() + row * width);
  }
  Tensor full = ctx.tensor(static_cast<int64_t>(d.S) * d.B * width);
  place_rows(d, d.cp_rank, current.data(), full.data());
  for (int step = 1; step < d.cp; step++) {
    Tensor received = ctx.tensor(count);
    ctx.groups.cp_ring_shift(received.data(), current.data(), count);
    place_rows(d, (d.cp_rank - step + d.cp) % d.cp, received.data(), full.data());
    current = std::move(received);
  }
  return full;
}

}  // namespace

void ring_attention_forward(const RankContext& ctx, float* out, float* att, const float* qkv) {
  const ShardDims& d = ctx.dims;
  const Tensor kv = gather_kv(ctx, qkv);
  cp_attention_forward(out, att, qkv, kv.data(), d.positions.data(), d.T, d.S, d.B, d.NH, d.KVH,
                       d.HS);
}

void ring_attention_backward(const RankContext& ctx, float* dqkv, const float* dout,
                             const float* att, const float* qkv) {
  const ShardDims& d = ctx.dims;
  const Tensor kv = gather_kv(ctx, qkv);
  Tensor recomputed;
  if (att == nullptr) {
    recomputed = ctx.tensor(static_cast<int64_t>(d.B) * d.NH * d.T * d.S);
    Tensor out = ctx.tensor(static_cast<int64_t>(d.N) * d.NH * d.HS);
    cp_attention_forward(out.data(), recomputed.data(), qkv, kv.data(), d.positions.data(), d.T,
                         d.S, d.B, d.NH, d.KVH, d.HS);
    att = recomputed.data();
  }
  const int64_t width = kv_width(d);
  Tensor dkv = ctx.tensor(static_cast<int64_t>(d.S) * d.B * width);
  cp_attention_backward(dqkv, dkv.data(), dout, att, qkv, kv.data(), d.positions.data(), d.T, d.S,
                        d.B, d.NH, d.KVH, d.HS);
  // Ring reduction onto the owners: the sum for owner j starts at rank j + 1 and gathers each
  // rank's contribution on its way round, reaching j after cp - 1 sends.
  const int64_t count = static_cast<int64_t>(d.N) * width;
  Tensor sum = ctx.tensor(count);
  take_rows(d, (d.cp_rank - 1 + d.cp) % d.cp, dkv.data(), sum.data());
  Tensor mine = ctx.tensor(count);
  for (int step = 0; step + 1 < d.cp; step++) {
    Tensor received = ctx.tensor(count);
    ctx.groups.cp_ring_shift(received.data(), sum.data(), count);
    take_rows(d, (d.cp_rank - 2 - step + 2 * d.cp) % d.cp, dkv.data(), mine.data());
    for (int64_t i = 0; i < count; i++) {
      received.data()[i] += mine.data()[i];
    }
    sum = std::move(received);
  }
  for (int64_t row = 0; row < d.N; row++) {
    float* target = dqkv + row * d.QKV + d.NH * d.HS;
    for (int64_t i = 0; i < width; i++) {
      target[i] += sum.data()[row * width + i];
    }
  }
}

}  // namespace meshplan::executor
