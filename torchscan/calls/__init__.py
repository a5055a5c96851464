"""The call an analysis runs: generated inputs, one decode step with a KV cache, and fake-tensor stand-ins.

`inputs` checks the arguments that describe generated inputs (shapes, dtypes, device) and makes the tensors;
`decode` builds the call of one generated token after a given context and states the KV-cache bytes it reads;
`stand_ins` swaps the model's and the call's tensors for fake tensors on another device, so that kernels are chosen
as there; `meta_kernels` runs attention on meta as the fused kernel CUDA would pick. The crawler, the training step and the cost curves take their calls from here; this package imports
only the engine's vocabulary (`torchscan.results`, `torchscan.values`).
"""
