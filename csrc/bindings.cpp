// Python bindings of one evpack extension (evpack._C, or evpack._canaries with the canary kernels).
//
//   forward(q, k, v, out, causal, scale, variant, config, stream) -> None
//       out = softmax(scale * q k^T [causal mask]) v, launched on `stream`
//       (torch.cuda.current_stream().cuda_stream). Never synchronizes.
//   kernels() -> list[(variant, config, dtype, head_dim, dynamic_smem_bytes, threads)]
//       every kernel built into this extension, with the launch shape of one CTA
//
// No c10/cuda or ATen/cuda header is used: the CPU build of torch used on the build machines
// ships without them. The kernels are reached through the registry (evpack/registry.h).
//
// Not <torch/extension.h>: it includes all of libtorch's C++ API (nn, optim, autograd, ...) and made this
// file the build's slowest object by three times. A tensor and pybind11's converter for it are all it uses.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "evpack/params.h"
#include "evpack/registry.h"

namespace {

constexpr int64_t kAlignElems = 8;  // 16-byte vector loads: base pointers and strides in units of 8 elements

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none built)" : out;
}

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    default: return nullptr;
  }
}

void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& q) {
  TORCH_CHECK(t.defined(), name, ": must be a tensor, got None");
  TORCH_CHECK(t.is_cuda(), name, ": must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK(t.device() == q.device(), name, ": must be on the same device as q (", q.device(), "), got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, name,
              ": dtype must be float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), name, ": dtype must equal q's (", q.scalar_type(), "), got ",
              t.scalar_type());
  TORCH_CHECK(t.dim() == 4, name, ": must be 4-D (batch, heads, seqlen, head_dim), got ", t.dim(), "-D shape ",
              t.sizes());
  TORCH_CHECK(t.sizes() == q.sizes(), name, ": shape must equal q's ", q.sizes(), ", got ", t.sizes());
  TORCH_CHECK(t.stride(3) == 1, name, ": last dimension must be contiguous (stride 1), got stride ", t.stride(3));
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % (kAlignElems * t.element_size()) == 0, name,
              ": data pointer must be 16-byte aligned (kernels use 16-byte vector loads)");
  static const char* kDims[] = {"batch", "heads", "seqlen"};
  for (int d = 0; d < 3; ++d) {
    // A dimension of size 1 is never stepped over, so its stride does not matter.
    TORCH_CHECK(t.size(d) == 1 || t.stride(d) % kAlignElems == 0, name, ": ", kDims[d], " stride (stride(", d,
                ") = ", t.stride(d), ") must be a multiple of 8 elements (16-byte aligned rows)");
  }
}

// Scratch memory for a launch (FwdParams::scratch): byte tensors on q's device from torch's allocator, held until
// forward() returns. The allocator orders their reuse on the current stream, the one the Python API launches on.
struct Scratch {
  at::TensorOptions options;
  std::vector<at::Tensor> held;

  static void* allocate(void* ctx, size_t bytes) {
    auto* self = static_cast<Scratch*>(ctx);
    self->held.push_back(at::empty({static_cast<int64_t>(bytes)}, self->options));
    return self->held.back().data_ptr();
  }
};

// Why no kernel matches (variant, config, dtype, head_dim): names what this extension holds. Cold path.
void lookup_failed(const std::string& variant, const std::string& config, const char* dtype,
                   int64_t head_dim) {
  std::vector<std::string> variants, configs, builds;
  std::set<std::string> seen;
  for (const evpack::KernelEntry& e : evpack::registered_kernels()) {
    if (seen.insert(e.variant).second) variants.push_back(e.variant);
    if (variant == e.variant) {
      if (std::find(configs.begin(), configs.end(), e.config) == configs.end()) configs.push_back(e.config);
      if (config == e.config) builds.push_back(std::string(e.dtype) + "/d" + std::to_string(e.head_dim));
    }
  }
  TORCH_CHECK(seen.count(variant), "variant: unknown variant '", variant, "' (known: ", join(variants), ")");
  TORCH_CHECK(std::find(configs.begin(), configs.end(), config) != configs.end(), "config: unknown config '",
              config, "' for variant '", variant, "' (known: ", join(configs), ")");
  TORCH_CHECK(false, "q: variant '", variant, "' config '", config, "' is not built for dtype ", dtype,
              " and head_dim ", head_dim, " (built: ", join(builds), ")");
}

void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out, bool causal,
             double scale, const std::string& variant, const std::string& config, int64_t stream) {
  TORCH_CHECK(q.defined(), "q: must be a tensor, got None");
  check_tensor(q, "q", q);
  check_tensor(k, "k", q);
  check_tensor(v, "v", q);
  check_tensor(out, "out", q);
  TORCH_CHECK(q.numel() > 0, "q: must be non-empty, got shape ", q.sizes());
  const int64_t batch = q.size(0), heads = q.size(1), seqlen = q.size(2), head_dim = q.size(3);
  TORCH_CHECK(head_dim == 64 || head_dim == 128, "q: head_dim (size(3)) must be 64 or 128, got ", head_dim);
  TORCH_CHECK(batch * heads <= 65535, "q: batch * heads must be at most 65535 (grid.y limit), got ",
              batch * heads);
  TORCH_CHECK(seqlen <= std::numeric_limits<int>::max() / 2, "q: seqlen too large, got ", seqlen);
  TORCH_CHECK(std::isfinite(scale), "scale: must be finite, got ", scale);

  // Kernel lookup. The diagnostic lists (what this extension holds) are built only when it fails.
  const char* dtype = dtype_name(q.scalar_type());
  const evpack::KernelEntry* entry = evpack::find_kernel(variant, config, dtype, static_cast<int>(head_dim));
  if (entry == nullptr) lookup_failed(variant, config, dtype, head_dim);
  // Kernels launch on the current CUDA device; the stream handle must belong to q's device.
  int current = -1;
  const cudaError_t dev_err = cudaGetDevice(&current);
  TORCH_CHECK(dev_err == cudaSuccess, "evpack: cudaGetDevice failed: ", cudaGetErrorString(dev_err));
  TORCH_CHECK(current == q.get_device(), "q: is on cuda:", q.get_device(), " but the current CUDA device is cuda:",
              current, "; use torch.cuda.device(q.device)");

  evpack::FwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.q_batch_stride = q.stride(0), p.q_head_stride = q.stride(1), p.q_row_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_head_stride = k.stride(1), p.k_row_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_head_stride = v.stride(1), p.v_row_stride = v.stride(2);
  p.o_batch_stride = out.stride(0), p.o_head_stride = out.stride(1), p.o_row_stride = out.stride(2);
  p.batch = static_cast<int>(batch);
  p.heads = static_cast<int>(heads);
  p.seqlen = static_cast<int>(seqlen);
  p.head_dim = static_cast<int>(head_dim);
  p.scale = static_cast<float>(scale);
  p.causal = causal;
  Scratch scratch{q.options().dtype(at::kByte), {}};
  p.scratch = &Scratch::allocate;
  p.scratch_ctx = &scratch;

  const cudaError_t launch_err = entry->launch(p, reinterpret_cast<cudaStream_t>(stream));
  const cudaError_t last_err = cudaGetLastError();  // also clears a non-sticky error for the next call
  const cudaError_t err = launch_err != cudaSuccess ? launch_err : last_err;
  if (err == cudaErrorNoKernelImageForDevice) {  // e.g. an sm_90a-only variant on another GPU
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current);
    TORCH_CHECK(false, "variant: '", variant, "' has no kernel for this device (cuda:", current, ", sm_", major,
                minor, "): it is built for other archs (`python -m evpack kernels`; wgmma needs sm_90a)");
  }
  TORCH_CHECK(err == cudaSuccess, "evpack: launch of ", variant, "/", config, "/", dtype, "/d", head_dim,
              " failed: ", cudaGetErrorString(err));
}

using KernelRow = std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t>;

std::vector<KernelRow> kernels() {
  std::vector<KernelRow> out;
  for (const evpack::KernelEntry& e : evpack::registered_kernels())
    out.emplace_back(e.variant, e.config, e.dtype, e.head_dim, static_cast<int64_t>(e.dynamic_smem_bytes), e.threads);
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "evpack flash-attention forward kernels (see csrc/include/evpack/registry.h)";
  m.def("forward", &forward, "out = softmax(scale * q k^T) v on the given stream; checks every input",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("causal"), py::arg("scale"),
        py::arg("variant"), py::arg("config"), py::arg("stream"));
  m.def("kernels", &kernels,
        "Every (variant, config, dtype, head_dim, dynamic_smem_bytes, threads) built into this extension");
}
