#pragma once
// Eigen views over the executor's raw contiguous buffers. Every kernel maps, never copies.
// Kernels are templates on Real and instantiated for float (the executor runs fp32) and double
// (the finite-difference tests run the same code in double).

#include <Eigen/Core>

namespace meshplan::executor {

template <typename Real>
using RowMatrix = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A row-major (rows, cols) matrix whose rows are `row_stride` elements apart.
template <typename Real>
using StridedMap = Eigen::Map<RowMatrix<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename Real>
using ConstStridedMap = Eigen::Map<const RowMatrix<Real>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename Real>
using MatrixMap = Eigen::Map<RowMatrix<Real>>;
template <typename Real>
using ConstMatrixMap = Eigen::Map<const RowMatrix<Real>>;

template <typename Real>
using VectorMap = Eigen::Map<Eigen::Matrix<Real, Eigen::Dynamic, 1>>;
template <typename Real>
using ConstVectorMap = Eigen::Map<const Eigen::Matrix<Real, Eigen::Dynamic, 1>>;

}  // namespace meshplan::executor
