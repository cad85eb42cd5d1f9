// Host-side check of wgmma's work schedule (csrc/variants/wgmma/scheduler.cuh), built by tests/test_wgmma_schedule.py
// with nvcc and run on the CPU: for each case on stdin, "batch heads seqlen block_m block_n causal grid split", walks
// every work index of every CTA of a persistent grid of that size, with the scheduler of a TAIL_SPLIT config (split
// 1) or of one without (0), and prints one line of JSON: the split the launch takes and what the walk saw. The test
// holds the facts (every item's K/V tiles covered once, pieces within the grid, the busiest CTA's load). A CTA's
// load counts K/V tiles times the consumer warpgroups that compute them (those wholly past seqlen skip the item).
#include <cstdio>
#include <vector>

#include "csrc/variants/wgmma/scheduler.cuh"

template <int kBlockM, int kBlockN, bool kSplit>
void walk(int batch, int heads, int seqlen, bool causal, int grid_max) {
  using Sched = evpack::wgmma::TileScheduler<kBlockM, kBlockN, kSplit>;
  evpack::FwdParams p{};
  p.batch = batch, p.heads = heads, p.seqlen = seqlen, p.causal = causal;
  const long long n_m = (seqlen + kBlockM - 1) / kBlockM, items = n_m * batch * heads;
  const auto split = kSplit ? evpack::wgmma::detail::tail_split(items, grid_max, (seqlen + kBlockN - 1) / kBlockN,
                                                                 causal)
                            : evpack::wgmma::detail::TailSplit{items, 1};
  const Sched sched(p, false, static_cast<int>(split.whole_items), split.splits);
  const long long work = split.n_work(items);
  const int grid = static_cast<int>(work < grid_max ? work : grid_max);
  std::vector<int> cover(items * ((seqlen + kBlockN - 1) / kBlockN + 1), 0);
  const int stride = (seqlen + kBlockN - 1) / kBlockN + 1;
  int bad_ranges = 0, max_pieces_per_cta = 0, max_tiles_per_cta = 0, pieces = 0;
  long long max_load = 0;
  for (int b = 0; b < grid; ++b) {
    int own_pieces = 0, own_tiles = 0;
    long long load = 0;
    for (int tile = b; sched.valid(tile); tile += grid) {
      evpack::wgmma::TileCoord c = sched.coord(tile);
      if (!kSplit) c.kv_begin = 0, c.kv_end = sched.kv_tiles(c.m_block);
      constexpr int kGroups = kBlockM / evpack::wgmma::kRowsPerConsumer;
      const int groups = c.m_block == n_m - 1 ? kGroups - Sched::idle_consumers(seqlen) : kGroups;
      load += static_cast<long long>(groups) * (c.kv_end - c.kv_begin);
      if (c.kv_begin < 0 || c.kv_end <= c.kv_begin || c.kv_end > sched.kv_tiles(c.m_block)) ++bad_ranges;
      const long long at = (static_cast<long long>(c.bh) * n_m + c.m_block) * stride;
      for (int j = c.kv_begin; j < c.kv_end && j < stride; ++j) ++cover[at + j];
      own_tiles += c.kv_end - c.kv_begin;
      if (c.piece >= 0) ++own_pieces, ++pieces;
    }
    max_pieces_per_cta = own_pieces > max_pieces_per_cta ? own_pieces : max_pieces_per_cta;
    max_tiles_per_cta = own_tiles > max_tiles_per_cta ? own_tiles : max_tiles_per_cta;
    max_load = load > max_load ? load : max_load;
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
              "\"bad_ranges\": %d, \"max_load\": %lld}\n",
              items, split.whole_items, split.splits, grid, pieces, max_pieces_per_cta, max_tiles_per_cta, covered_once,
              miscovered, bad_ranges, max_load);
}

int main() {
  int batch, heads, seqlen, block_m, block_n, causal, grid, split;
  while (std::scanf("%d %d %d %d %d %d %d %d", &batch, &heads, &seqlen, &block_m, &block_n, &causal, &grid, &split) ==
         8) {
    const bool c = causal != 0;
    if (block_m == 128 && block_n == 128 && split) {
      walk<128, 128, true>(batch, heads, seqlen, c, grid);
    } else if (block_m == 128 && block_n == 128) {
      walk<128, 128, false>(batch, heads, seqlen, c, grid);
    } else if (block_m == 192 && block_n == 128 && split) {
      walk<192, 128, true>(batch, heads, seqlen, c, grid);
    } else if (block_m == 192 && block_n == 128) {
      walk<192, 128, false>(batch, heads, seqlen, c, grid);
    } else {
      std::printf("{\"error\": \"no such tile\"}\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
