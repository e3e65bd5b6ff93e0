"""Bootstrapping a communicator across nodes with torch's TCPStore (or any torch.distributed
Store): every rank puts its node's irisd address under its rank, rank 0 makes the job's secret,
everyone reads the rest.

    store = torch.distributed.TCPStore(host, port, world_size, is_master=(rank == 0))
    nodes = node_set_from_store(client, store, rank, world_size, node=my_node)
    comm = irisd.Communicator(client, "job-42", world_size, rank, nodes=nodes)

`node` numbers this rank's irisd from 0 (ranks sharing an irisd pass the same number)."""
import os

import irisd


def node_set_from_store(client, store, rank, world_size, node, prefix="iris/"):
    store.set(f"{prefix}address/{rank}", client.node_address())
    store.set(f"{prefix}node/{rank}", str(node))
    if rank == 0:
        store.set(f"{prefix}secret", os.urandom(32))
    node_of_rank = [int(store.get(f"{prefix}node/{r}")) for r in range(world_size)]
    by_node = {}
    for r in range(world_size):
        by_node.setdefault(node_of_rank[r], store.get(f"{prefix}address/{r}"))
    if sorted(by_node) != list(range(len(by_node))):
        raise ValueError("node_set_from_store: nodes must be numbered 0, 1, ... without gaps")
    return irisd.NodeSet([by_node[n] for n in range(len(by_node))], node_of_rank,
                        store.get(f"{prefix}secret"))
