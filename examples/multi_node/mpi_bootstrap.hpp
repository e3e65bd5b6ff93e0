// Bootstrapping a communicator across nodes with MPI: every rank asks its node's irisd for its
// address, MPI gathers them and each rank's node, rank 0 makes the job's secret and broadcasts
// it. The result goes to iris::Communicator::init(client, key, nranks, rank, nodes).
//   iris::NodeSet nodes = iris::example::nodes_from_mpi(client, MPI_COMM_WORLD, my_node);
#pragma once

#include <mpi.h>

#include <cstdint>
#include <fstream>
#include <iris/iris.hpp>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace iris::example {

// `node`: this rank's node (its irisd), numbered by the job from 0; ranks sharing an irisd must
// pass the same number.
inline NodeSet nodes_from_mpi(Client& client, MPI_Comm comm, uint32_t node) {
  int rank = 0, nranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nranks);
  const std::string mine = client.node_address();
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(nranks);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  std::vector<int> displs(nranks);
  int total = 0;
  for (int r = 0; r < nranks; ++r) {
    displs[r] = total;
    total += lengths[r];
  }
  std::string all(total, '\0');
  MPI_Allgatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), displs.data(), MPI_BYTE,
                 comm);
  std::vector<uint32_t> node_of_rank(nranks);
  MPI_Allgather(&node, 1, MPI_UINT32_T, node_of_rank.data(), 1, MPI_UINT32_T, comm);

  NodeSet nodes;
  nodes.node_of_rank = node_of_rank;
  std::map<uint32_t, std::string> by_node;
  for (int r = 0; r < nranks; ++r) by_node[node_of_rank[r]] = all.substr(displs[r], lengths[r]);
  for (const auto& [n, address] : by_node) {
    if (n != nodes.addresses.size())
      throw std::runtime_error("nodes_from_mpi: nodes must be numbered 0, 1, ... without gaps");
    nodes.addresses.push_back(address);
  }
  nodes.secret.assign(32, '\0');
  if (rank == 0) {
    std::ifstream random("/dev/urandom", std::ios::binary);
    random.read(nodes.secret.data(), static_cast<std::streamsize>(nodes.secret.size()));
  }
  MPI_Bcast(nodes.secret.data(), static_cast<int>(nodes.secret.size()), MPI_BYTE, 0, comm);
  return nodes;
}

}  // namespace iris::example
