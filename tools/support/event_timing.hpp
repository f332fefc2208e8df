#pragma once
// Device-event timing shared by the CLI's bench rows (scores and top-k): the median and minimum
// of back-to-back runs, and the same for a CUDA graph of captured calls replayed (host cost
// excluded). Through the library's lazily loaded driver, so that tools start without one.
#include <cuda.h>

#include <algorithm>
#include <vector>

#include "cuda/driver.hpp"
#include "stats.hpp"

namespace dsa_support {

struct Timed {
  double median_us = 0;
  double min_us = 0;
};

// Median and minimum device-event time of `reps` runs of `body(i)` (which enqueues on `stream`),
// divided by `calls` (the calls one body run makes).
template <class Body>
Timed event_times(int reps, CUstream stream, int calls, Body&& body) {
  namespace dd = dsa_indexer::detail;
  dd::Driver& d = dd::Driver::get();
  CUevent e0, e1;
  d.check(d.cuEventCreate(&e0, 0), "cuEventCreate");
  d.check(d.cuEventCreate(&e1, 0), "cuEventCreate");
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    d.check(d.cuEventRecord(e0, stream), "cuEventRecord");
    body(i);
    d.check(d.cuEventRecord(e1, stream), "cuEventRecord");
    d.check(d.cuEventSynchronize(e1), "cuEventSynchronize");
    float ms = 0;
    d.check(d.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
    us.push_back(ms * 1e3 / calls);
  }
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  Timed t;
  t.median_us = median(us);
  t.min_us = *std::min_element(us.begin(), us.end());
  return t;
}

// Median device time per call of `enqueue(stream)` with the same inputs every time (L2 warm):
// one call outside the capture (it loads the kernels), then a CUDA graph of `per_graph`
// captured calls replayed `reps` times on a created non-blocking stream.
template <class Enqueue>
Timed graph_times(int reps, int per_graph, Enqueue&& enqueue) {
  namespace dd = dsa_indexer::detail;
  dd::ScopedContext ctx(0);
  dd::Driver& d = dd::Driver::get();
  CUstream st = nullptr;
  d.check(d.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  enqueue(st);
  d.check(d.cuStreamSynchronize(st), "cuStreamSynchronize");
  CUgraph g = nullptr;
  CUgraphExec ge = nullptr;
  d.check(d.cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  for (int i = 0; i < per_graph; ++i) enqueue(st);
  d.check(d.cuStreamEndCapture(st, &g), "cuStreamEndCapture");
  d.check(d.cuGraphInstantiateWithFlags(&ge, g, 0), "cuGraphInstantiateWithFlags");
  for (int i = 0; i < 2; ++i) d.check(d.cuGraphLaunch(ge, st), "cuGraphLaunch");
  Timed t = event_times(reps, st, per_graph, [&](int) { d.check(d.cuGraphLaunch(ge, st), "cuGraphLaunch"); });
  d.cuGraphExecDestroy(ge);
  d.cuGraphDestroy(g);
  d.cuStreamDestroy(st);
  return t;
}

}  // namespace dsa_support
