"""Device helpers for kernels: `@tiledsl.inline` functions (expanded at each call site) and the layouts and host
arithmetic that go with them, written in the kernel language like any user's code. tiledsl.ops builds on them; a
kernel of your own imports them the same way:

    from tiledsl.lib.reductions import warp_allreduce, block_allreduce

- `reductions`: `warp_allreduce(v, op)` and `block_allreduce(v, red, op, threads)` ("add" or "max", float32) by
  `shfl.sync.bfly`, through one shared buffer and one barrier for a block.
- `exp2_fma`: `exp2_fma(y, x)`, 2^x on the FMA pipe instead of MUFU (the FA3 softmax's polynomial share).
- `producer`: the warp-specialised Hopper producer's pieces: `elect_one()` (the elected issuing lane),
  `warpgroup_index(tid)` (warp-uniform), `consumer_registers(...)` (the `setmaxnreg` split that cannot hang).
- `staging`: a wgmma accumulator out through shared memory for the TMA store (`packed_words`, `staging_layouts`).

Importing this package imports none of them (nor torch)."""
