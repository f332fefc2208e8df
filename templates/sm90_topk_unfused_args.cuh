#pragma once
// Launch arguments of sm90_topk_rows (sm90_topk_unfused.cuh); fixed-width members only, so the
// host fills the same layout.
#include "dsa_args.cuh"
#include "sm90_topk_select_args.cuh"

namespace dsa {

struct TopkBlockArgs {
  DsaArgs a;       // the whole top-k problem (its windows, offsets and THD metadata)
  i64 row0;        // BSHD: first row of the block inside batch `batch`; THD: first packed row
  i64 batch;       // BSHD: the block's batch entry
  i64 n_rows;      // rows in the block
  i64 n_win;       // rows of the block's score call (>= n_rows): the rows past n_rows get empty
                   // windows (explicit windows: the call padded to whole q-tiles)
  i64 k_base;      // absolute key row (BSHD: inside the batch) of the block's workspace column 0
  i32 global;      // report global indices
  i32 pad_;
  i32* ks;         // out: the block score call's explicit windows, in its key columns
  i32* ke;
  i32* offset;     // out (BSHD, when not null): the block score call's q_causal_offsets[0]
  TopkRow* rows;   // out: the selection's rows
};

}  // namespace dsa
