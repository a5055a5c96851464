"""Sharded training: the per-device memory of a data-parallel training step, from PyTorch's own FSDP2.

The question this package answers is "will this step fit on N devices, and with how much room". Nothing here
models a parallel strategy by hand: `step.sharded_step` applies PyTorch's ``fully_shard`` to a copy of the model
whose tensors are fake-tensor stand-ins, joins a fake process group of the plan's world size as one rank, runs the
training step as a loop runs it, and traces the bytes that rank holds after every operator.

One concern per module, each importing only from those before it:

- `plan`: the parallel plan (strategy, world size, shard group, mixed precision, sharding units), checked;
- `fake_world`: a fake process group and device mesh for the length of a block, leaving the caller's state as it was;
- `sharding`: the stand-in copy of the model, its sharding units, ``fully_shard`` and activation checkpointing;
- `memory`: the rank's traced timeline: storages of wrapper subclasses (``DTensor``), storage resizes that FSDP
  makes outside dispatch, and the labels of what is live (sharded and unsharded parameters, gradient shards, ...);
- `collectives`: the bytes each collective moves per step, observed from dispatch and from the closed form;
- `step`: ``sharded_step``, the per-device section.

``docs/parallel.md`` states what runs, what is fake and what is not modelled.
"""
