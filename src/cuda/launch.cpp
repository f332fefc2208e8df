#include "cuda/launch.hpp"

#include "core/util.hpp"

#include <algorithm>

namespace dsa_indexer::detail {

bool TmaGeometry::operator==(const TmaGeometry& o) const {
  return rank == o.rank && std::equal(dims, dims + 5, o.dims) && std::equal(strides_bytes, strides_bytes + 4, o.strides_bytes) &&
         std::equal(box, box + 5, o.box) && elem_bytes == o.elem_bytes;
}

const TmaDescBytes& TmaMemo::get(const void* base, const TmaGeometry& g) {
  if (!valid_ || base != base_ || !(g == geometry_)) {
    valid_ = false;  // stays invalid if encoding throws
    encode_tma(&map_, base, g.rank, g.dims, g.strides_bytes, g.box, g.elem_bytes);
    base_ = base;
    geometry_ = g;
    valid_ = true;
  }
  return map_;
}

void launch_one(CUfunction f, const KernelLaunch& l, CUstream stream, void** params, const char* what) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = l.grid[0];
  cfg.gridDimY = l.grid[1];
  cfg.gridDimZ = l.grid[2];
  cfg.blockDimX = l.block[0];
  cfg.blockDimY = l.block[1];
  cfg.blockDimZ = l.block[2];
  cfg.sharedMemBytes = l.smem;
  cfg.hStream = stream;
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  Driver& d = Driver::get();
  d.check(d.cuLaunchKernelEx(&cfg, f, params, nullptr), what);
}

}  // namespace dsa_indexer::detail
