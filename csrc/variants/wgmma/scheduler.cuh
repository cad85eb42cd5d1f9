// wgmma: the tile scheduler. A work item is BLOCK_M query rows of one (batch, head); the grid is at most one
// CTA per SM, and CTA b takes work items b, b + grid, ... in an order chosen per launch:
//   not causal:              head-major: the query blocks of one head are neighbours, so the CTAs that run
//                            them together share its K/V in L2.
//   causal, longest first:   every head's last query block first, then every head's second to last, ...: the
//                            static round-robin ends with the short items (LPT-like balance), but each round
//                            reads a different head's K/V per CTA.
//   causal, head-major:      as not causal, with each head's query blocks rotated by bh (a bijection per head),
//                            so one CTA's items do not all have the same length (grid = 132, n_m = 4: bh steps
//                            by 33 per round, the block by 1 mod 4). The host takes it where its static balance
//                            is as good as longest-first's (causal_head_major; bench/NOTES.md, wgmma section 5).
#pragma once

#include <cstring>

#include "evpack/params.h"

namespace evpack {
namespace wgmma {

struct TileCoord {
  int m_block, bh;
};

template <int kBlockM, int kBlockN>
struct TileScheduler {
  int seqlen, n_m, n_bh, n_work;
  bool causal, head_major;

  __device__ __forceinline__ TileScheduler(const FwdParams& p, bool head_major_order)
      : seqlen(p.seqlen),
        n_m((p.seqlen + kBlockM - 1) / kBlockM),
        n_bh(p.batch * p.heads),
        n_work(n_m * n_bh),
        causal(p.causal),
        head_major(head_major_order) {}

  __device__ __forceinline__ int first() const { return blockIdx.x; }
  __device__ __forceinline__ int next(int tile) const { return tile + gridDim.x; }
  __device__ __forceinline__ bool valid(int tile) const { return tile < n_work; }
  __device__ __forceinline__ TileCoord coord(int tile) const {
    if (causal && !head_major) return {n_m - 1 - tile / n_bh, tile % n_bh};
    const int bh = tile / n_m, r = tile % n_m;
    return {causal ? (r + bh) % n_m : r, bh};
  }
  // K/V tiles of query block m_block: keys [0, kv_tiles * BLOCK_N); causal stops at its last row.
  __device__ __forceinline__ int kv_tiles(int m_block) const {
    const int m_end = (m_block + 1) * kBlockM;
    return ((causal ? min(seqlen, m_end) : seqlen) + kBlockN - 1) / kBlockN;
  }
};

namespace detail {

// Largest (K/V tiles + work items) over the CTAs of a static round-robin of the causal work items, in the
// longest-first (head_major = false) or the rotated head-major order (as TileScheduler::coord).
inline long long max_cta_load(int n_m, int n_bh, int grid, int seqlen, int block_m, int block_n, bool head_major) {
  long long worst = 0;
  const long long n_work = static_cast<long long>(n_m) * n_bh;
  for (int b = 0; b < grid; ++b) {
    long long load = 0;
    for (long long tile = b; tile < n_work; tile += grid) {
      const long long m_block = head_major ? (tile % n_m + tile / n_m) % n_m : n_m - 1 - tile / n_bh;
      const long long keys = seqlen < (m_block + 1) * block_m ? seqlen : (m_block + 1) * block_m;
      load += (keys + block_n - 1) / block_n + 1;
    }
    worst = load > worst ? load : worst;
  }
  return worst;
}

// Causal work order of one launch: head-major (K/V shared in L2 by the CTAs that run together) where it
// balances the static round-robin as well as longest-first does; the last decision is kept per host thread
// (a benchmark repeats one shape).
inline bool causal_head_major(int n_m, int n_bh, int grid, int seqlen, int block_m, int block_n) {
  constexpr long long kMaxItems = 1 << 16;  // host time bound: longer launches keep longest-first
  if (static_cast<long long>(n_m) * n_bh > kMaxItems) return false;
  struct Memo {
    int key[5] = {-1, -1, -1, -1, -1};
    bool head_major = false;
  };
  thread_local Memo memo;
  const int key[5] = {n_m, n_bh, grid, seqlen, block_m * 1024 + block_n};
  if (std::memcmp(key, memo.key, sizeof(key)) != 0) {
    memo.head_major = max_cta_load(n_m, n_bh, grid, seqlen, block_m, block_n, true) <=
                      max_cta_load(n_m, n_bh, grid, seqlen, block_m, block_n, false);
    std::memcpy(memo.key, key, sizeof(key));
  }
  return memo.head_major;
}

}  // namespace detail
}  // namespace wgmma
}  // namespace evpack
