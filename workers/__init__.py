"""Worker side of inasched: allreduce client, parameter server, rendezvous, PyTorch hook.

Modules (flat; torch is imported only by `torch_backend`, `torch_hook` and `train_example`):
`client` (`AllreduceClient`), `options` (`ClientOptions`), `burst_io`, `inflight`, `transfer`
and `retransmit` (its parts), `quant` (block floating point and the error bound), `ps`
(`ParameterServer`; ``inasched ps`` is ``cli.ps``), `ps_control` (its control channel),
`accumulator` (the PS's exactly-once bookkeeping), `rendezvous` (`join`, `load_config`,
`WorkerJoin`), `worker` (``inasched worker``), `torch_backend` and `torch_hook` (PyTorch),
`train_example`, `errors`.
"""
