"""Worker side of inasched: allreduce client, parameter server, rendezvous, PyTorch hook.

Modules (flat; torch is imported only by `torch_hook` and `train_example`):
`client` (`AllreduceClient`), `transfer` and `retransmit` (its parts), `quant` (block floating
point and the error bound), `ps` (`ParameterServer`, ``inasched ps``), `accumulator` (the PS's
exactly-once bookkeeping), `rendezvous` (`join`, `load_config`, `WorkerJoin`), `worker`
(``inasched worker``), `torch_hook` (DDP communication hook), `train_example`, `errors`.
"""
