#include "bucket_split.h"

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
