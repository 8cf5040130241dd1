// The segment size of a ring whose edges cross hosts.
//
// Over TCP (Open MPI's tcp BTL) a message above the BTL's eager limit goes by
// rendezvous: its sender waits for a control message from the receiver before
// the bulk of the data leaves. In a ring both directions of a link are busy at
// once, and that control message travels in the same TCP stream as the
// receiver's own bulk data, behind megabytes queued in the socket and the
// link: every segment then waits for that queue to drain, and a 2-host ring
// reached half of a 2 Gbit/s link (docs/multihost.md). Segments that fit the
// eager limit leave without waiting for anything, and fill the link.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "horovodlite/common.h"
#include "horovodlite/config.h"
#include "ops/ring_allreduce.h"
#include "world.h"

namespace horovodlite {

// Open MPI's btl_tcp_eager_limit (bytes, including its header) read through the
// MPI tool interface; 0 when this MPI has no such variable (another MPI, or the
// tcp BTL is not loaded).
int64_t tcp_eager_limit_bytes();

// Collective over `comm`. The segment for a ring over `comm`: `configured`, or
// when `crosses_hosts` and the tcp BTL's eager limit is known on every rank, the
// largest multiple of 64 bytes that still goes eagerly (the limit less 64 bytes
// of headers) if that is smaller. Every rank gets the same value (the minimum).
Status ring_segment_bytes(MPI_Comm comm, int64_t configured, bool crosses_hosts, int64_t* out);

// Collective over an MPI world's ranks: the options of the world's flat ring
// (segments as above across hosts). On failure (on any rank) every rank gets
// an error, and should not set the ring up.
Status mpi_ring_options(const World& world, const Config& config, RingAllreduceOptions* out);

}  // namespace horovodlite
