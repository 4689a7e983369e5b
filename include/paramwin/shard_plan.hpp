#pragma once
/// @file shard_plan.hpp
/// ShardPlan: how an agent of g ranks spreads one model over its ranks. Every layer is cut on
/// element boundaries into g contiguous ranges of nearly equal length (the first
/// `count % g` ranges one element longer); shard s holds range s of every layer. So each rank
/// exposes ~1/g of every layer and ~1/g of the bytes whatever the layer sizes, and a layer
/// smaller than g leaves some shards an empty range of it.

#include <cstddef>
#include <vector>

#include "paramwin/layout.hpp"

namespace paramwin {

/// The cut of a full Layout into @ref shards() shards (see the file comment).
class ShardPlan {
 public:
  /// Cuts @p full into @p shards shards; throws InvalidArgument when @p shards < 1.
  ShardPlan(Layout full, int shards);

  [[nodiscard]] int shards() const noexcept { return shards_; }        ///< g
  [[nodiscard]] const Layout& full() const noexcept { return full_; }  ///< the whole model
  /// The layout of shard @p s: the full layout's layers, same names, order and dtypes, each
  /// one-dimensional with the range's element count (0 where the range is empty).
  [[nodiscard]] const Layout& shard_layout(int s) const;
  /// First element of layer @p layer held by shard @p s.
  [[nodiscard]] std::size_t first(std::size_t layer, int s) const;
  /// Elements of layer @p layer held by shard @p s.
  [[nodiscard]] std::size_t count(std::size_t layer, int s) const;
  /// Bytes of shard @p s in the layers' own dtypes.
  [[nodiscard]] std::size_t bytes(int s) const { return shard_layout(s).total_bytes(); }

 private:
  void check(int s) const;

  Layout full_;
  int shards_;
  std::vector<Layout> layouts_;
};

}  // namespace paramwin
