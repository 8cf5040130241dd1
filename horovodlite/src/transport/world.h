// The world of a job started without MPI (horovodlite-run --gloo, the elastic
// driver, the Spark and Ray engines): every rank connects to every other through
// the launcher's rendezvous store (Config::gloo: HOROVOD_RANK, HOROVOD_SIZE,
// HOROVOD_HOSTNAME, HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT, HOROVOD_GLOO_IFACE,
// HOROVOD_GLOO_TIMEOUT_SECONDS, HOROVODLITE_GLOO_SCOPE). The one place that
// knows whether this build has Gloo.
#pragma once

#include "horovodlite/config.h"
#include "transport/transport.h"

namespace horovodlite {
namespace transport {

// Collective over the job's ranks: the connected world, or an error naming the
// rendezvous and this rank (Unimplemented in a build without Gloo).
Status connect_world(const Config& config, ContextPtr* out);

// Whether this build has the Gloo TCP transport (HVL_WITH_GLOO).
bool gloo_transport_built();

}  // namespace transport
}  // namespace horovodlite
