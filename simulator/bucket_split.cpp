#include "bucket_split.h"

#include <algorithm>
#include <cstddef>
#include <numeric>

namespace meshplan::simulator {

std::vector<std::vector<Piece>> split_carriers(const std::vector<double>& carrier_seconds,
                                               const std::vector<int64_t>& bucket_bytes,
                                               BucketEdge edge) {
  const std::size_t num_carriers = carrier_seconds.size();
  const auto num_buckets = static_cast<int32_t>(bucket_bytes.size());
  std::vector<std::vector<Piece>> pieces(num_carriers);
  // The timeline length, summed in the same order as the carriers' ends below, so that the
  // last boundary (fraction 1) falls exactly on the last carrier's end.
  double total_seconds = 0;
  for (double seconds : carrier_seconds) {
    total_seconds += seconds;
  }
  const double total_bytes =
      static_cast<double>(std::accumulate(bucket_bytes.begin(), bucket_bytes.end(), int64_t{0}));
  if (total_seconds <= 0 || num_buckets == 0) {
    for (std::size_t j = 0; j < num_carriers; ++j) {
      pieces[j].push_back(Piece{carrier_seconds[j], {}});
    }
    // Gradients: all ready when the last carrier ends; parameters: all needed by the first.
    Piece& holder = edge == BucketEdge::kReadyAtEnd ? pieces.back().back() : pieces.front().front();
    for (int32_t k = 0; k < num_buckets; ++k) {
      holder.buckets.push_back(k);
    }
    return pieces;
  }
  // positions[k]: where bucket k attaches on the timeline.
  std::vector<double> positions(static_cast<std::size_t>(num_buckets));
  int64_t cumulative = 0;
  for (int32_t k = 0; k < num_buckets; ++k) {
    if (edge == BucketEdge::kNeededAtStart) {
      positions[k] = static_cast<double>(cumulative) / total_bytes * total_seconds;
    }
    cumulative += bucket_bytes[k];
    if (edge == BucketEdge::kReadyAtEnd) {
      positions[k] = static_cast<double>(cumulative) / total_bytes * total_seconds;
    }
  }
  int32_t k = 0;
  double offset = 0;
  std::vector<int32_t> waiting;  // kNeededAtStart: buckets for the next piece created
  for (std::size_t j = 0; j < num_carriers; ++j) {
    const double end = offset + carrier_seconds[j];
    double cut = offset;
    std::vector<Piece>& out = pieces[j];
    if (edge == BucketEdge::kReadyAtEnd) {
      for (; k < num_buckets && positions[k] <= end; ++k) {
        if (positions[k] > cut) {
          out.push_back(Piece{positions[k] - cut, {k}});
          cut = positions[k];
        } else if (!out.empty()) {
          out.back().buckets.push_back(k);  // same boundary as the previous bucket
        } else {
          // On this carrier's start: ready with the previous carrier's last piece.
          Piece* previous = nullptr;
          for (std::size_t i = j; i-- > 0 && previous == nullptr;) {
            previous = pieces[i].empty() ? nullptr : &pieces[i].back();
          }
          if (previous == nullptr) {
            out.push_back(Piece{0.0, {}});
            previous = &out.back();
          }
          previous->buckets.push_back(k);
        }
      }
      if (end > cut || out.empty()) {
        out.push_back(Piece{end - cut, {}});
      }
    } else {
      for (; k < num_buckets && positions[k] < end; ++k) {
        if (positions[k] > cut) {
          out.push_back(Piece{positions[k] - cut, std::move(waiting)});
          waiting.clear();
          cut = positions[k];
        }
        waiting.push_back(k);
      }
      out.push_back(Piece{end - cut, std::move(waiting)});
      waiting.clear();
    }
    offset = end;
  }
  // Rounding can leave the last gradient boundary a hair past the timeline's end.
  for (; k < num_buckets; ++k) {
    pieces.back().back().buckets.push_back(k);
  }
  return pieces;
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {
namespace {

// Where each bucket attaches on [0, seconds]: before (needed) or after (ready) its bytes.
std::vector<double> positions(double seconds, const std::vector<int64_t>& bytes, bool after) {
  const double total = static_cast<double>(std::accumulate(bytes.begin(), bytes.end(), int64_t{0}));
  std::vector<double> out;
  int64_t cumulative = 0;
  for (int64_t b : bytes) {
    if (after) {
      cumulative += b;
    }
    out.push_back(static_cast<double>(cumulative) / total * seconds);
    if (!after) {
      cumulative += b;
    }
  }
  return out;
}

}  // namespace

std::vector<OpPiece> split_op(double seconds, const std::vector<int64_t>& need_bytes,
                              const std::vector<int64_t>& ready_bytes) {
  if (!(seconds > 0)) {
    OpPiece piece{seconds, {}, {}};
    for (int32_t k = 0; k < static_cast<int32_t>(need_bytes.size()); ++k) {
      piece.needs.push_back(k);
    }
    for (int32_t k = 0; k < static_cast<int32_t>(ready_bytes.size()); ++k) {
      piece.ready.push_back(k);
    }
    return {piece};
  }
  const std::vector<double> needs = positions(seconds, need_bytes, false);
  const std::vector<double> ready = positions(seconds, ready_bytes, true);
  std::vector<double> bounds{0.0, seconds};
  for (const auto* list : {&needs, &ready}) {
    for (double p : *list) {
      if (p > 0 && p < seconds) {
        bounds.push_back(p);
      }
    }
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const auto num_pieces = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<OpPiece> pieces(static_cast<size_t>(num_pieces));
  for (int64_t i = 0; i < num_pieces; ++i) {
    pieces[i].seconds = bounds[i + 1] - bounds[i];
  }
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, num_pieces - 1); };
  for (int32_t k = 0; k < static_cast<int32_t>(needs.size()); ++k) {
    // The piece that starts at (or contains) the point.
    const auto at = std::upper_bound(bounds.begin(), bounds.end(), needs[k]) - bounds.begin() - 1;
    pieces[clamp(at)].needs.push_back(k);
  }
  for (int32_t k = 0; k < static_cast<int32_t>(ready.size()); ++k) {
    // The piece that ends at (or contains) the point.
    const auto at =
        std::lower_bound(bounds.begin() + 1, bounds.end(), ready[k]) - bounds.begin() - 1;
    pieces[clamp(at)].ready.push_back(k);
  }
  return pieces;
}

}  // namespace meshplan::simulator
