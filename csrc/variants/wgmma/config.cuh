// wgmma: compile-time shape of one instantiation and the shared-memory layout of a CTA.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>  // CUtensorMap

namespace evpack {
namespace wgmma {

constexpr int kRowsPerConsumer = 64;  // wgmma M: one consumer warpgroup owns 64 query rows
constexpr int kBoxCols = 64;          // 64 elements of T = 128 bytes: the widest 128B-swizzled TMA box
constexpr int kBoxRowBytes = 128;


// The four TMA descriptors of one launch and its work order (TileScheduler), passed by value as a
// __grid_constant__ kernel parameter.
struct TmaMaps {
  CUtensorMap q, k, v, o;
  int head_major;  // causal only: 1 = head-major rotated order, 0 = longest first
  // TAIL_SPLIT configs, not causal: the work items from `whole_items` on (fewer than the grid) run as `splits`
  // pieces each, a piece a share of the item's K/V tiles on a CTA of its own (1: no item is split; split.cuh). A
  // piece's consumers leave their unnormalised O, max and sum in `partials`; `arrivals` (zeroed before the launch)
  // counts the pieces done per item and consumer warpgroup.
  int whole_items, splits;
  float* partials;
  int* arrivals;
};

template <class Cfg, int kHeadDim>
struct Shape {
  static constexpr int kBlockM = Cfg::kBlockM;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr int kConsumers = kBlockM / kRowsPerConsumer;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // setmaxnreg targets: 24 x 128 + 240 x 256 = 64512 and 32 x 128 + 160 x 384 = 65536, of 65536
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kDBoxes = kHeadDim / kBoxCols;
  static constexpr int kKSteps = kHeadDim / 16;              // k16 steps of Q.K^T
  static constexpr int kPSteps = kBlockN / 16;               // k16 steps of P.V
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;     // one Q (or O) tile
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;    // one K (or V) tile
  static constexpr int kQBoxBytes = kBlockM * kBoxRowBytes;  // one 64-column box of a Q (or O) tile
  static constexpr int kKVBoxBytes = kBlockN * kBoxRowBytes; // one 64-column box of a K or V tile
  static constexpr int kMaxSmem = 227 * 1024;                // sm_90 opt-in limit per block
  static constexpr int kStages = Cfg::kStages;  // K/V ring depth
  static constexpr bool kTailSplit = Cfg::kTailSplit;  // the last round may be split (scheduler.cuh)
  // Causal: a consumer warpgroup stops at its own last row's key tile (mainloop.cuh). In the long-sequence config
  // only: the other configs keep the code they had (bench/NOTES.md, wgmma sections 12 and 13).
  static constexpr bool kCausalStop = kTailSplit;
  static constexpr int kSmemTiles = 3 * kQBytes /* 2 Q, O */ + 2 * kStages * kKVBytes;
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kSmemTiles + 1024 /* barriers */;

  static_assert(kBlockM % kRowsPerConsumer == 0 && kConsumers >= 1 && kConsumers <= 3,
                "wgmma: BLOCK_M must be 64, 128 or 192 (one to three consumer warpgroups of 64 rows)");
  static_assert(Cfg::kWarps == 4 * (kConsumers + 1), "wgmma: WARPS must be 4 x (1 producer + BLOCK_M / 64 consumers)");
  static_assert(kConsumers < 3 || kHeadDim == 64,
                "wgmma: three consumer warpgroups (160 registers each) fit head_dim 64 only "
                "(registry: head_dims=(64,))");
  static_assert(kBlockN == 64 || kBlockN == 128, "wgmma: BLOCK_N must be 64 or 128 (wgmma N of Q.K^T)");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "wgmma: head_dim must be 64 or 128");
  static_assert(kStages >= 1, "wgmma: STAGES must be at least 1");
  static_assert(kSmemBytes <= kMaxSmem, "wgmma: Q tile + STAGES K/V tiles exceed the 227 KB shared-memory limit");
  static_assert((4 + 4 * kStages) * 8 + 4 * kConsumers <= 1024, "wgmma: the barriers outgrow their 1024 bytes");
};

template <class Cfg, class T, int kHeadDim>
constexpr size_t dynamic_smem_bytes() {
  return static_cast<size_t>(Shape<Cfg, kHeadDim>::kSmemBytes);
}

// The CTA's dynamic shared memory (1024-byte aligned; every tile stored as boxes of 64 columns = 128 bytes
// per row, 128B-swizzled by TMA, the layout wgmma reads through make_smem_desc_sw128):
//   q   (2, D / 64, BLOCK_M, 64)        T   Q of the current and the next work item
//   o   (D / 64, BLOCK_M, 64)           T   O staging for the TMA store
//   k   (STAGES, D / 64, BLOCK_N, 64)   T   K ring
//   v   (STAGES, D / 64, BLOCK_N, 64)   T   V ring
//   barriers: q_full[2], q_empty[2], k_full[S], v_full[S], k_empty[S], v_empty[S]
//   last_piece[consumers]                   int  split items: whether this warpgroup's piece arrived last
template <class S>
struct SharedStorage {
  uint8_t *q, *o, *k, *v;
  uint64_t *q_full, *q_empty, *k_full, *v_full, *k_empty, *v_empty;
  int* last_piece;

  __device__ __forceinline__ explicit SharedStorage(uint8_t* raw) {
    q = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    o = q + 2 * S::kQBytes;
    k = o + S::kQBytes;
    v = k + S::kStages * S::kKVBytes;
    uint64_t* bars = reinterpret_cast<uint64_t*>(v + S::kStages * S::kKVBytes);
    q_full = bars;
    q_empty = bars + 2;
    k_full = bars + 4;
    v_full = k_full + S::kStages;
    k_empty = v_full + S::kStages;
    v_empty = k_empty + S::kStages;
    last_piece = reinterpret_cast<int*>(v_empty + S::kStages);
  }
};

}  // namespace wgmma
}  // namespace evpack
