// canary_timing_aware: the scalar kernel, honest when called on its own; a launch that comes less than
// kRapidNs after the previous one on the host (a timed loop, a warm-up loop) copies the output it computed
// last into o instead of computing. Right whenever the inputs did not change since that output (the same
// inputs called over and over, as warm-up and warm timing loops used to do), stale otherwise. Under CUDA-graph
// capture it launches honestly (behaving differently when captured is a class of its own).
// Gate that must fire: bench (every timed call sees content no call saw before, and a seeded random timed
// call of a batch is re-checked, after the batch, against an untimed call on exactly the inputs it saw).
#pragma once

#include <chrono>
#include <cstdint>

#include "csrc/variants/scalar.cuh"

namespace evpack {
namespace canary_timing_aware {

// 2 ms: a timing loop enqueues its calls well within that of each other (each after a per-call content raise
// on the host); the first call after a host wait (a batch's end, a check) computes. 100 us was too short: with
// the per-call content raise between timed calls the cheat never fired on an H200 (pack 20261124T153635Z).
constexpr int64_t kRapidNs = 2000000;

template <class Cfg, class T, int kHeadDim>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fwd_kernel(FwdParams p) {
  scalar::fwd_block<Cfg, T, kHeadDim>(p);
}

using scalar::dynamic_smem_bytes;  // the scalar kernel's shared-memory layout

struct LastOutput {
  void* copy = nullptr;  // the last computed output (contiguous)
  size_t bytes = 0;
  bool valid = false;
  std::chrono::steady_clock::time_point last_call{};
  bool called = false;
};

inline LastOutput& last() {
  static LastOutput state;
  return state;
}

template <class Cfg, class T, int kHeadDim>
cudaError_t launch(const FwdParams& p, cudaStream_t stream) {
  LastOutput& s = last();
  const auto now = std::chrono::steady_clock::now();
  const bool rapid = s.called && std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.last_call).count() <
                                     kRapidNs;
  s.last_call = now;
  s.called = true;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) return err;
  // The copy assumes a contiguous output (what every caller in this repository passes).
  const size_t bytes = size_t(p.batch) * p.heads * p.seqlen * p.head_dim * sizeof(T);
  const bool captured = capture != cudaStreamCaptureStatusNone;
  if (rapid && !captured && s.valid && s.bytes == bytes)  // planted fault: called in a loop, skip the work
    return cudaMemcpyAsync(p.o, s.copy, bytes, cudaMemcpyDeviceToDevice, stream);
  err = launch_over_query_tiles<Cfg>(fwd_kernel<Cfg, T, kHeadDim>, dynamic_smem_bytes<Cfg, T, kHeadDim>(), p,
                                     stream);
  if (err != cudaSuccess || captured) return err;
  if (s.bytes != bytes) {
    if (s.copy != nullptr) cudaFree(s.copy);
    s.copy = nullptr;
    s.valid = false;
    err = cudaMalloc(&s.copy, bytes);
    if (err != cudaSuccess) return err;
    s.bytes = bytes;
  }
  s.valid = true;
  return cudaMemcpyAsync(s.copy, p.o, bytes, cudaMemcpyDeviceToDevice, stream);
}

}  // namespace canary_timing_aware
}  // namespace evpack
