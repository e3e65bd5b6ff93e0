// libiris: collectives (all-gather, all-to-all(-v), broadcast, gather, scatter, barrier) run by
// irisd on copy engines. See README.md for a walk-through.
#pragma once

#include "iris/buffer.hpp"
#include "iris/client.hpp"
#include "iris/communicator.hpp"
#include "iris/error.hpp"
#include "iris/group.hpp"
#include "iris/request.hpp"
