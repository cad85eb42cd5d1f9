// The Triton kernels' launcher (see csrc/include/evpack/triton_launch.h). Driver API entry points come
// from cudart (cudaGetDriverEntryPointByVersion): the extension links no libcuda, so it still imports on
// a machine without a driver (the build stage lists its kernels there).
#include "evpack/triton_launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace evpack {
namespace {

struct Driver {
  PFN_cuModuleLoadData_v2000 module_load_data = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function = nullptr;
  PFN_cuFuncSetAttribute_v9000 func_set_attribute = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel = nullptr;
  cudaError_t status = cudaSuccess;
};

template <class Fn>
cudaError_t entry_point(const char* name, int version, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
  if (err != cudaSuccess) return err;
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorNotSupported;
  *out = reinterpret_cast<Fn>(fn);
  return cudaSuccess;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    cudaError_t err = entry_point("cuModuleLoadData", 2000, &x.module_load_data);
    if (err == cudaSuccess) err = entry_point("cuModuleGetFunction", 2000, &x.module_get_function);
    if (err == cudaSuccess) err = entry_point("cuFuncSetAttribute", 9000, &x.func_set_attribute);
    if (err == cudaSuccess) err = entry_point("cuLaunchKernel", 4000, &x.launch_kernel);
    x.status = err;
    return x;
  }();
  return d;
}

cudaError_t to_runtime(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return cudaErrorNoKernelImageForDevice;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return cudaErrorLaunchOutOfResources;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    default: return cudaErrorLaunchFailure;
  }
}

// One loaded function per (kernel, device): the module lives as long as the process.
std::mutex g_mutex;
std::map<std::pair<const TritonKernel*, int>, CUfunction> g_functions;

cudaError_t function_for(const TritonKernel& k, int device, unsigned int shared, CUfunction* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_functions.find({&k, device});
  if (it != g_functions.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  const Driver& d = driver();
  if (d.status != cudaSuccess) return d.status;
  cudaError_t err = cudaFree(nullptr);  // the device's primary context is current (torch made it)
  if (err != cudaSuccess) return err;
  CUmodule module = nullptr;
  CUresult r = d.module_load_data(&module, k.fatbin);
  if (r != CUDA_SUCCESS) return to_runtime(r);
  CUfunction fn = nullptr;
  r = d.module_get_function(&fn, module, k.symbol);
  if (r != CUDA_SUCCESS) return to_runtime(r);
  if (shared > 48 * 1024) {
    r = d.func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared));
    if (r != CUDA_SUCCESS) return to_runtime(r);
  }
  g_functions[{&k, device}] = fn;
  *out = fn;
  return cudaSuccess;
}

// stride / 8 as the kernel takes it; 0 for a dimension of size 1 (never stepped over, any stride allowed).
bool stride8(int64_t stride, int64_t size, int32_t* out) {
  const int64_t s = size == 1 ? 0 : stride / 8;
  if (s < 0 || s > INT32_MAX) return false;
  *out = static_cast<int32_t>(s);
  return true;
}

}  // namespace

cudaError_t triton_launch(const TritonKernel& k, const FwdParams& p, cudaStream_t stream) {
  int device = -1;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int major = 0, minor = 0;
  err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) return err;
  const TritonImage* image = nullptr;
  for (int i = 0; i < k.n_images && i < kMaxTritonImages; ++i)
    if (k.images[i].cc == 10 * major + minor) image = &k.images[i];
  if (image == nullptr) return cudaErrorNoKernelImageForDevice;  // built for other device generations
  CUfunction fn = nullptr;
  err = function_for(k, device, image->shared_bytes, &fn);
  if (err != cudaSuccess) return err;

  // Row offsets are computed in 32 bits inside the kernel: (seqlen + a tile) rows of any tensor must fit.
  const int64_t rows = static_cast<int64_t>(p.seqlen) + 256;
  for (int64_t row_stride : {p.q_row_stride, p.k_row_stride, p.v_row_stride, p.o_row_stride})
    if (p.seqlen > 1 && row_stride * rows > INT32_MAX) return cudaErrorInvalidValue;
  const int64_t strides[12][2] = {
      {p.q_batch_stride, p.batch}, {p.q_head_stride, p.heads}, {p.q_row_stride, p.seqlen},
      {p.k_batch_stride, p.batch}, {p.k_head_stride, p.heads}, {p.k_row_stride, p.seqlen},
      {p.v_batch_stride, p.batch}, {p.v_head_stride, p.heads}, {p.v_row_stride, p.seqlen},
      {p.o_batch_stride, p.batch}, {p.o_head_stride, p.heads}, {p.o_row_stride, p.seqlen}};
  int32_t s8[12];
  for (int i = 0; i < 12; ++i)
    if (!stride8(strides[i][0], strides[i][1], &s8[i])) return cudaErrorInvalidValue;

  CUdeviceptr q = reinterpret_cast<CUdeviceptr>(p.q), kk = reinterpret_cast<CUdeviceptr>(p.k);
  CUdeviceptr v = reinterpret_cast<CUdeviceptr>(p.v), o = reinterpret_cast<CUdeviceptr>(p.o);
  int32_t heads = p.heads, seqlen = p.seqlen, causal = p.causal ? 1 : 0;
  float scale = p.scale;
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  void* args[] = {&q, &kk, &v, &o, &s8[0], &s8[1], &s8[2], &s8[3], &s8[4], &s8[5], &s8[6], &s8[7], &s8[8],
                  &s8[9], &s8[10], &s8[11], &heads, &seqlen, &scale, &causal, &global_scratch, &profile_scratch};
  const unsigned grid_x = static_cast<unsigned>((p.seqlen + k.block_m - 1) / k.block_m);
  const unsigned grid_y = static_cast<unsigned>(p.batch) * static_cast<unsigned>(p.heads);
  const CUresult r = driver().launch_kernel(fn, grid_x, grid_y, 1, 32u * static_cast<unsigned>(k.warps), 1, 1,
                                            image->shared_bytes, reinterpret_cast<CUstream>(stream), args, nullptr);
  return to_runtime(r);
}

}  // namespace evpack
