#include "context_parallel.h"

#include <algorithm>
#include <cstdint>

#include "ops/cp_attention.h"

namespace meshplan::executor {

namespace {

// Q K^T's scale: the model's (TransformerConfig::attention_scale; validate_plan_for_executor
// refuses Gemma 2's query_pre_attn_scalar with cp, so it is 1 / sqrt(HS) but for MLA under YaRN).
float ring_score_scale(const ShardDims& d) {
  return static_cast<float>(d.model.attention_scale());
}

// Columns of a K/V row: the rank's kv heads of K, then of V (contiguous in a fused qkv row),
// HS each; multi-head latent attention keeps its value heads zero-padded to HS there.
int kv_width(const ShardDims& d) {
  return 2 * d.KVH * d.HS;
}

// Columns of a value head on the wire: DV with MLA, whose padding is not sent (Transformer
// Engine's AttnFuncWithCPAndKVP2P sends torch.cat((k.view(-1), v.view(-1))), v at its own head
// dim when k.shape[-1] != v.shape[-1], enable_mla), else HS.
int value_width(const ShardDims& d) {
  return d.DV > 0 ? d.DV : d.HS;
}

// Columns of a K/V row on the wire: the K heads, then the V heads at value_width.
int wire_width(const ShardDims& d) {
  return d.KVH * (d.HS + value_width(d));
}

// wire (wire_width) = a K/V row (kv_width) without the value heads' padding.
void to_wire(const ShardDims& d, const float* row, float* wire) {
  const int V = value_width(d);
  std::copy_n(row, d.KVH * d.HS, wire);
  for (int h = 0; h < d.KVH; h++) {
    std::copy_n(row + (d.KVH + h) * d.HS, V, wire + d.KVH * d.HS + h * V);
  }
}

// row (kv_width) += wire (wire_width); the value heads' padding is left as it is.
void add_from_wire(const ShardDims& d, const float* wire, float* row) {
  const int V = value_width(d);
  for (int i = 0; i < d.KVH * d.HS; i++) {
    row[i] += wire[i];
  }
  for (int h = 0; h < d.KVH; h++) {
    for (int i = 0; i < V; i++) {
      row[(d.KVH + h) * d.HS + i] += wire[d.KVH * d.HS + h * V + i];
    }
  }
}

// Adds the (T, B, wire) rows of cp rank `owner` into their sequence positions of full
// (S, B, KV), zero there before (each position is placed once).
void place_rows(const ShardDims& d, int owner, const float* rows, float* full) {
  const std::vector<int> positions = cp_positions(d.S, d.cp, owner);
  const int64_t width = kv_width(d);
  const int64_t wire = wire_width(d);
  for (int t = 0; t < d.T; t++) {
    for (int b = 0; b < d.B; b++) {
      add_from_wire(d, rows + (static_cast<int64_t>(t) * d.B + b) * wire,
                    full + (static_cast<int64_t>(positions[t]) * d.B + b) * width);
    }
  }
}

// rows (T, B, wire) = the positions of cp rank `owner` taken from full (S, B, KV).
void take_rows(const ShardDims& d, int owner, const float* full, float* rows) {
  const std::vector<int> positions = cp_positions(d.S, d.cp, owner);
  const int64_t width = kv_width(d);
  const int64_t wire = wire_width(d);
  for (int t = 0; t < d.T; t++) {
    for (int b = 0; b < d.B; b++) {
      to_wire(d, full + (static_cast<int64_t>(positions[t]) * d.B + b) * width,
              rows + (static_cast<int64_t>(t) * d.B + b) * wire);
    }
  }
}

// The whole sequence's K/V (S, B, KV): this rank's from qkv, the others' over cp - 1 ring steps
// (step i brings the chunk of cp rank r - i).
Tensor gather_kv(const RankContext& ctx, const float* qkv) {
  const ShardDims& d = ctx.dims;
  const int64_t wire = wire_width(d);
  const int64_t count = static_cast<int64_t>(d.N) * wire;
  Tensor current = ctx.tensor(count);
  for (int64_t row = 0; row < d.N; row++) {
    to_wire(d, qkv + row * d.QKV + d.NH * d.HS, current.data() + row * wire);
  }
  Tensor full = ctx.tensor(static_cast<int64_t>(d.S) * d.B * kv_width(d));
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
                       d.HS, ring_score_scale(d));
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
                         d.S, d.B, d.NH, d.KVH, d.HS, ring_score_scale(d));
    att = recomputed.data();
  }
  Tensor dkv = ctx.tensor(static_cast<int64_t>(d.S) * d.B * kv_width(d));
  cp_attention_backward(dqkv, dkv.data(), dout, att, qkv, kv.data(), d.positions.data(), d.T, d.S,
                        d.B, d.NH, d.KVH, d.HS, ring_score_scale(d));
  // Ring reduction onto the owners: the sum for owner j starts at rank j + 1 and gathers each
  // rank's contribution on its way round, reaching j after cp - 1 sends.
  const int64_t wire = wire_width(d);
  const int64_t count = static_cast<int64_t>(d.N) * wire;
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
    add_from_wire(d, sum.data() + row * wire, dqkv + row * d.QKV + d.NH * d.HS);
  }
}

}  // namespace meshplan::executor
