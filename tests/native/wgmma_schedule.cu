// Host-side check of wgmma's work schedule (csrc/variants/wgmma/scheduler.cuh), built by tests/test_wgmma_schedule.py
// with nvcc and run on the CPU: for each case on stdin, "batch heads seqlen block_m block_n causal grid", walks every
// work index of every CTA of a persistent grid of that size and prints one line of JSON: the split the launch takes
// and what the walk saw. The test holds the facts (every item's K/V tiles covered once, pieces within the grid).
#include <cstdio>
#include <vector>

#include "csrc/variants/wgmma/scheduler.cuh"

template <int kBlockM, int kBlockN>
void walk(int batch, int heads, int seqlen, bool causal, int grid_max) {
  evpack::FwdParams p{};
  p.batch = batch, p.heads = heads, p.seqlen = seqlen, p.causal = causal;
  const long long n_m = (seqlen + kBlockM - 1) / kBlockM, items = n_m * batch * heads;
  const auto split = evpack::wgmma::detail::tail_split(items, grid_max, (seqlen + kBlockN - 1) / kBlockN, causal);
  const evpack::wgmma::TileScheduler<kBlockM, kBlockN, true> sched(p, false, static_cast<int>(split.whole_items),
                                                             split.splits);
  const long long work = split.n_work(items);
  const int grid = static_cast<int>(work < grid_max ? work : grid_max);
  std::vector<int> cover(items * ((seqlen + kBlockN - 1) / kBlockN + 1), 0);
  const int stride = (seqlen + kBlockN - 1) / kBlockN + 1;
  int bad_ranges = 0, max_pieces_per_cta = 0, max_tiles_per_cta = 0, pieces = 0;
  for (int b = 0; b < grid; ++b) {
    int own_pieces = 0, own_tiles = 0;
    for (int tile = b; sched.valid(tile); tile += grid) {
      const evpack::wgmma::TileCoord c = sched.coord(tile);
      if (c.kv_begin < 0 || c.kv_end <= c.kv_begin || c.kv_end > sched.kv_tiles(c.m_block)) ++bad_ranges;
      for (int j = c.kv_begin; j < c.kv_end && j < stride; ++j) ++cover[(static_cast<long long>(c.bh) * n_m + c.m_block) * stride + j];
      own_tiles += c.kv_end - c.kv_begin;
      if (c.piece >= 0) ++own_pieces, ++pieces;
    }
    max_pieces_per_cta = own_pieces > max_pieces_per_cta ? own_pieces : max_pieces_per_cta;
    max_tiles_per_cta = own_tiles > max_tiles_per_cta ? own_tiles : max_tiles_per_cta;
  }
  long long covered_once = 0, miscovered = 0;
  for (long long item = 0; item < items; ++item) {
    const int n = sched.kv_tiles(static_cast<int>(item % n_m));
    bool once = true;
    for (int j = 0; j < stride; ++j) once = once && cover[item * stride + j] == (j < n ? 1 : 0);
    once ? ++covered_once : ++miscovered;
  }
  std::printf("{\"items\": %lld, \"whole_items\": %lld, \"splits\": %d, \"grid\": %d, \"pieces\": %d, "
              "\"max_pieces_per_cta\": %d, \"max_tiles_per_cta\": %d, \"covered_once\": %lld, \"miscovered\": %lld, "
              "\"bad_ranges\": %d}\n",
              items, split.whole_items, split.splits, grid, pieces, max_pieces_per_cta, max_tiles_per_cta, covered_once,
              miscovered, bad_ranges);
}

int main() {
  int batch, heads, seqlen, block_m, block_n, causal, grid;
  while (std::scanf("%d %d %d %d %d %d %d", &batch, &heads, &seqlen, &block_m, &block_n, &causal, &grid) == 7) {
    if (block_m == 128 && block_n == 128) walk<128, 128>(batch, heads, seqlen, causal != 0, grid);
    else if (block_m == 192 && block_n == 128) walk<192, 128>(batch, heads, seqlen, causal != 0, grid);
    else std::printf("{\"error\": \"no such tile\"}\n");
    std::fflush(stdout);
  }
  return 0;
}
