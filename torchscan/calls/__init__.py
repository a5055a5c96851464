"""The call an analysis runs: generated inputs, one decode step with a KV cache, and fake-tensor stand-ins.

`inputs` checks the arguments that describe generated inputs and makes the tensors; `decode` builds the call of one
generated token and states the KV-cache bytes it reads; `stand_ins` swaps tensors for fake tensors of another device;
`meta_kernels` runs attention on meta as the fused kernel CUDA would pick. The crawler, the training step and the
cost curves take their calls from here; this package imports only `torchscan.results` and `torchscan.values`.
"""
