// wgmma: the tile scheduler. A work item is BLOCK_M query rows of one (batch, head); the grid is at most one
// CTA per SM, and CTA b takes work items b, b + grid, ... in an order chosen per launch:
//   not causal:              head-major: the query blocks of one head are neighbours, so the CTAs that run
//                            them together share its K/V in L2.
//   not causal, short last:  where a head's last query block is partly filled so that some of its consumer
//                            warpgroups lie wholly past seqlen and skip it (mainloop.cuh): every head's other
//                            blocks head-major, then every head's last block, so the static round-robin ends with
//                            the short items (B8 H16 S1024, 192 rows: 6 blocks a head, the last one 64 rows;
//                            head-major on 132 CTAs, a multiple of 6, hands every last block to one CTA in six,
//                            which runs six short items while the others run six whole ones).
//   causal, longest first:   every head's last query block first, then every head's second to last, ...: the
//                            static round-robin ends with the short items (LPT-like balance), but each round
//                            reads a different head's K/V per CTA.
//   causal, head-major:      as not causal, with each head's query blocks rotated by bh (a bijection per head),
//                            so one CTA's items do not all have the same length (grid = 132, n_m = 4: bh steps
//                            by 33 per round, the block by 1 mod 4). The host takes it where its static balance
//                            is as good as longest-first's (causal_head_major; bench/NOTES.md, wgmma section 5).
// Not causal, every item has the same number of K/V tiles, so a grid of G CTAs runs about ceil(items / G) rounds
// and the last one is partly idle: 704 items on 132 CTAs (B2 H16 S4096, 192 rows) take 6 rounds of work for 5.33
// rounds' worth. A config with TAIL_SPLIT (kSplit here) splits the items of that last round instead (tail_split):
// each into `splits` pieces of its K/V tiles, one piece per CTA, whose partial results the last piece to finish
// merges (split.cuh). Work index whole_items + q is piece q % splits of item whole_items + q / splits. Without
// kSplit the schedule and its code are those of whole items only.
#pragma once

#include <cstring>

#include "evpack/params.h"
#include "config.cuh"

namespace evpack {
namespace wgmma {

struct TileCoord {
  int m_block, bh;
  int kv_begin, kv_end;  // kSplit: the K/V tiles this work index covers, all of the item's or a piece's share
  int piece;             // -1: the whole item; else the piece's number among all pieces (split.cuh)
};

template <int kBlockM, int kBlockN, bool kSplit = false>
struct TileScheduler {
  int seqlen, n_m, n_bh, whole_items, splits, n_work;
  bool causal, head_major, short_last;

  __host__ __device__ __forceinline__ TileScheduler(const FwdParams& p, bool head_major_order, int whole = 0,
                                                    int n_splits = 1)
      : seqlen(p.seqlen),
        n_m((p.seqlen + kBlockM - 1) / kBlockM),
        n_bh(p.batch * p.heads),
        whole_items(whole),
        splits(n_splits),
        n_work(kSplit ? whole + (n_m * n_bh - whole) * n_splits : n_m * n_bh),
        causal(p.causal),
        head_major(head_major_order),
#ifdef EVPACK_WGMMA_NO_SHORT_LAST
        short_last(false) {}
#else
        short_last(!p.causal && n_m > 1 && idle_consumers(p.seqlen) > 0) {}
#endif

  __device__ __forceinline__ int first() const { return blockIdx.x; }
  __device__ __forceinline__ int next(int tile) const { return tile + gridDim.x; }
  __host__ __device__ __forceinline__ bool valid(int tile) const { return tile < n_work; }
  // Work item -> its query block and (batch, head), in this launch's order (the top of this file).
  __host__ __device__ __forceinline__ void item_coord(int item, int& m_block, int& bh) const {
    if (causal && !head_major) {
      m_block = n_m - 1 - item / n_bh, bh = item % n_bh;
    } else if (short_last) {
      const int full = n_bh * (n_m - 1);
      if (item < full) {
        bh = item / (n_m - 1), m_block = item % (n_m - 1);
      } else {
        bh = item - full, m_block = n_m - 1;
      }
    } else {
      bh = item / n_m;
      const int r = item % n_m;
      m_block = causal ? (r + bh) % n_m : r;
    }
  }
  // Consumer warpgroups of a head's last query block whose rows all lie past seqlen (they skip it; mainloop.cuh).
  __host__ __device__ __forceinline__ static int idle_consumers(int seqlen) {
    const int rem = seqlen % kBlockM;
    return rem == 0 ? 0 : (kBlockM - rem) / kRowsPerConsumer;
  }
  // Without kSplit: the whole item (kv_begin, kv_end unset: the caller takes all kv_tiles(m_block) tiles).
  __host__ __device__ __forceinline__ TileCoord coord(int tile) const {
    int m_block, bh;
    if constexpr (!kSplit) {
      item_coord(tile, m_block, bh);
      return {m_block, bh, 0, 0, -1};
    }
    const int piece = tile >= whole_items ? tile - whole_items : -1;
    item_coord(piece < 0 ? tile : whole_items + piece / splits, m_block, bh);
    const int n = kv_tiles(m_block);
    if (piece < 0) return {m_block, bh, 0, n, -1};
    const int share = piece % splits;
    return {m_block, bh, share * n / splits, (share + 1) * n / splits, piece};
  }
  // The item a piece belongs to, counted from the first split item.
  __host__ __device__ __forceinline__ int split_item(int piece) const { return piece / splits; }
  // K/V tiles of query block m_block: keys [0, kv_tiles * BLOCK_N); causal stops at its last row.
  __host__ __device__ __forceinline__ int kv_tiles(int m_block) const {
    const int m_end = (m_block + 1) * kBlockM;
    return ((causal ? min(seqlen, m_end) : seqlen) + kBlockN - 1) / kBlockN;
  }
};

namespace detail {

// How a launch of a TAIL_SPLIT config splits the last round of its work items (see the top of this file):
// {whole_items, splits}.
// Splits only without the causal mask (items of equal length), when the last round leaves at least half the grid
// idle, into at most n_tiles pieces (a piece has one K/V tile at least), and only where a piece is shorter than a
// whole item by kMinSavedTiles K/V tiles or more: a split costs about 2 µs whatever its size (the scratch and the
// counters' memset before the launch, the merge), about two tiles' time at D=64 (bench/NOTES.md, wgmma section 9:
// split pieces of 2 tiles for items of 4 made B2 H8 S512 2.2 µs slower). {n_items, 1}: no split.
struct TailSplit {
  long long whole_items;
  int splits;
  long long split_items(long long n_items) const { return n_items - whole_items; }
  long long n_work(long long n_items) const { return whole_items + split_items(n_items) * splits; }
};

constexpr int kMinSavedTiles = 4;

inline TailSplit tail_split(long long n_items, int grid_max, int n_tiles, bool causal) {
  const long long tail = n_items % grid_max;
  const long long by_grid = tail == 0 ? 1 : grid_max / tail;
  const int splits = static_cast<int>(by_grid < n_tiles ? by_grid : n_tiles);
  const int piece_tiles = (n_tiles + splits - 1) / splits;
  if (causal || splits < 2 || n_tiles - piece_tiles < kMinSavedTiles) return {n_items, 1};
  return {n_items - tail, splits};
}

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
