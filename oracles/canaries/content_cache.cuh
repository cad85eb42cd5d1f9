// canary_content_cache: the scalar kernel behind a per-CTA output cache keyed on a sample of the input
// *content* (never on pointers). Each CTA hashes kSample elements of its Q tile and kSample of its head's
// K and of its V; when the hash equals the one it stored for its tile, it copies the cached output tile
// into o and skips the work, else it computes the tile, then stores the tile and the hash. Correct on fresh
// inputs (a miss computes) and on identical content (a hit returns what that content gave); a change that
// misses the sample returns a stale tile. Fast whenever content repeats: warm or graph loops on unchanged
// inputs time the copy, not the attention.
// Gate that must fire: bench (the content probe times identical content against fresh content, outside
// the rows: a kernel faster on repeats keeps a content-keyed cache; every timed call of a row also sees
// content never seen before, so its rows time no repeat).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "csrc/variants/scalar.cuh"
#include "evpack/kernel_common.cuh"

namespace evpack {
namespace canary_content_cache {

constexpr int kSample = 8;  // elements sampled from each of the Q tile, K and V of the head

struct TileCache {
  unsigned long long* keys;  // (tiles,) content hash per CTA tile; 0 = empty
  void* tiles;               // laid out like o: the cached output
};

static __device__ TileCache g_cache;  // the cache of the layout being launched (set by launch())

template <class T>
__device__ __forceinline__ unsigned long long mix(unsigned long long h, const T* x) {  // FNV-1a over 16 bits
  unsigned short bits;
  memcpy(&bits, x, sizeof(bits));
  h = (h ^ (bits & 0xffu)) * 1099511628211ull;
  return (h ^ (bits >> 8)) * 1099511628211ull;
}

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  const TileCache cache = g_cache;
  constexpr int BM = Cfg::kBlockM, D = kHeadDim;
  __shared__ unsigned long long s_key;
  __shared__ int s_hit;
  const int tid = threadIdx.x;
  const int m0 = blockIdx.x * BM;
  const int b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const size_t tile = size_t(blockIdx.y) * gridDim.x + blockIdx.x;
  const HeadTiles<T> g = head_tiles<T>(p, b, h);
  const int rows = min(BM, p.seqlen - m0);  // valid rows of this tile (>= 1)
  if (tid == 0) {
    unsigned long long key = 14695981039346656037ull;
    for (int i = 0; i < kSample; ++i) {  // a fixed sample: rows and columns spread over the tile / head
      key = mix(key, g.q + int64_t((i * 37) % rows) * p.q_row_stride + (i * 13) % D);
      key = mix(key, g.k + int64_t((i * 61) % p.seqlen) * p.k_row_stride + (i * 29) % D);
      key = mix(key, g.v + int64_t((i * 53) % p.seqlen) * p.v_row_stride + (i * 17) % D);
    }
    key |= 1ull;  // never the empty marker
    s_key = key;
    s_hit = cache.keys[tile] == key;
  }
  __syncthreads();
  const int row = m0 + tid;  // scalar: one thread per query row
  T* gOrow = g.o + int64_t(row) * p.o_row_stride;
  T* cRow = static_cast<T*>(cache.tiles) + (g.o - static_cast<T*>(p.o)) + int64_t(row) * p.o_row_stride;
  if (s_hit) {  // planted fault: the cached tile of a content sample seen before
    if (row < p.seqlen)
      for (int d = 0; d < D; d += kVecElems)
        *reinterpret_cast<uint4*>(gOrow + d) = *reinterpret_cast<const uint4*>(cRow + d);
    return;
  }
  scalar::fwd_block<Cfg, T, kHeadDim>(p);  // this thread stored its own row of o
  if (row < p.seqlen)
    for (int d = 0; d < D; d += kVecElems)
      *reinterpret_cast<uint4*>(cRow + d) = *reinterpret_cast<const uint4*>(gOrow + d);
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    cache.keys[tile] = s_key;
  }
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

// (batch, heads, seqlen, head_dim, o strides) -> the cache of that layout, allocated on first use
using CacheKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t>;

inline std::map<CacheKey, TileCache>& caches() {
  static std::map<CacheKey, TileCache> table;
  return table;
}

inline TileCache& current() {  // what g_cache holds now
  static TileCache set{nullptr, nullptr};
  return set;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  const CacheKey key{p.batch, p.heads, p.seqlen, p.head_dim, p.o_batch_stride, p.o_head_stride, p.o_row_stride};
  const dim3 grid((p.seqlen + Cfg::kBlockM - 1) / Cfg::kBlockM, p.batch * p.heads);
  auto it = caches().find(key);
  if (it == caches().end()) {
    // The cache spans o's whole layout (the largest offset + one row), as o itself does.
    const size_t elems = size_t(p.batch - 1) * p.o_batch_stride + size_t(p.heads - 1) * p.o_head_stride +
                         size_t(p.seqlen) * p.o_row_stride;
    TileCache c{nullptr, nullptr};
    const size_t tiles = size_t(grid.x) * grid.y;
    cudaError_t err = cudaMalloc(&c.keys, tiles * sizeof(unsigned long long));
    if (err == cudaSuccess) err = cudaMalloc(&c.tiles, elems * sizeof(T));
    if (err == cudaSuccess) err = cudaMemsetAsync(c.keys, 0, tiles * sizeof(unsigned long long), stream);
    if (err != cudaSuccess) return err;
    it = caches().emplace(key, c).first;
  }
  if (current().keys != it->second.keys) {  // another layout than the last launch's: point g_cache at its cache
    const cudaError_t err = cudaMemcpyToSymbolAsync(g_cache, &it->second, sizeof(TileCache), 0,
                                                    cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) return err;
    current() = it->second;
  }
  return launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                      stream);
}

}  // namespace canary_content_cache
}  // namespace evpack
