// The kernel registry (see csrc/include/evpack/registry.h). Filled by static initializers of
// the generated instantiation files when the extension is loaded.
#include "evpack/registry.h"

#include <cstdio>

namespace evpack {
namespace {

std::vector<KernelEntry>& table() {  // function-local: safe against static-init order
  static std::vector<KernelEntry> entries;
  return entries;
}

bool same_key(const KernelEntry& e, const std::string& variant, const std::string& config,
              const std::string& dtype, int head_dim) {
  return variant == e.variant && config == e.config && dtype == e.dtype && head_dim == e.head_dim;
}

}  // namespace

int register_kernel(const KernelEntry& entry) {
  if (const KernelEntry* old = find_kernel(entry.variant, entry.config, entry.dtype, entry.head_dim)) {
    std::fprintf(stderr, "evpack: kernel %s/%s/%s/d%d registered twice; keeping the first\n",
                 old->variant, old->config, old->dtype, old->head_dim);
    return -1;
  }
  table().push_back(entry);
  return static_cast<int>(table().size()) - 1;
}

const std::vector<KernelEntry>& registered_kernels() { return table(); }

const KernelEntry* find_kernel(const std::string& variant, const std::string& config,
                               const std::string& dtype, int head_dim) {
  for (const KernelEntry& e : table())
    if (same_key(e, variant, config, dtype, head_dim)) return &e;
  return nullptr;
}

}  // namespace evpack
