// The transport over Gloo's TCP pairs (Debian's libgloo-dev): a full mesh of
// connections set up through a gloo::rendezvous::Store (the launcher's HTTP
// key-value store, or any Gloo store in tests); isend/irecv are Gloo unbound
// buffers sent to a slot that carries the context's channel and the tag.
// Built only with HVL_HAVE_GLOO.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "horovodlite/config.h"
#include "transport/transport.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace horovodlite {
namespace transport {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // This rank's host (HOROVOD_HOSTNAME): ranks with equal names share a host
  // in the topology. Empty: the machine's hostname.
  std::string hostname;
  // The network interface to bind (HOROVOD_GLOO_IFACE), or else the address to
  // bind (empty: 127.0.0.1 when every rank names the same host, else hostname).
  std::string iface;
  std::string bind_address;
  // Rendezvous and connect timeout (HOROVOD_GLOO_TIMEOUT_SECONDS).
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Ranks on one host (equal host names) exchange messages through shared
  // memory (gloo_shm.h) instead of TCP (HOROVODLITE_GLOO_SHM, default on).
  bool shared_memory = true;
  // Messages of kShmSingleCopyBytes and more are read by the receiver straight
  // from the sender's memory (gloo_shm.h) where the kernel allows it
  // (HOROVODLITE_GLOO_SHM=copy: false).
  bool single_copy = true;
  // Ranks on different hosts (or every pair, without shared memory) exchange
  // messages over connections of our own instead of Gloo's pairs
  // (gloo_tcp_direct.h; HOROVODLITE_GLOO_TCP=direct).
  bool direct_tcp = false;
  // Prefix of every key this world writes (a scope per world, e.g. "global").
  std::string prefix = "hvl";
  // The job's secret (raw bytes; Config::GlooJob::secret): signs the store's
  // requests and proves each direct TCP connection's peer. Empty (tests with
  // an in-process store): the direct TCP handshake uses a 128-bit random token.
  std::string secret;
};

// Collective over the options' ranks: connects the full mesh through `store`.
Status connect_gloo(const GlooOptions& options, std::shared_ptr<gloo::rendezvous::Store> store, ContextPtr* out);

// The same through the launcher's HTTP store at host:port, keys under `scope`.
Status connect_gloo_http(const GlooOptions& options, const std::string& host, int port, const std::string& scope,
                         ContextPtr* out);

// A Gloo job's world from its configuration (Config::gloo: the contract's
// HOROVOD_RANK/SIZE/HOSTNAME/GLOO_* variables), keys under its scope
// (HOROVODLITE_GLOO_SCOPE: "global", or one per elastic generation).
Status connect_gloo_from_config(const Config& config, ContextPtr* out);

// How many peers of `ctx` (a Gloo context) this rank reaches through shared
// memory; 0 for any other context.
int shared_memory_peers(const Context& ctx);
// How many peers of `ctx` (a Gloo context) this rank reaches over its own TCP
// connections (HOROVODLITE_GLOO_TCP=direct); 0 for any other context.
int direct_tcp_peers(const Context& ctx);

// gloo::rendezvous::Store over the HTTP key-value store (http_store.h).
std::shared_ptr<gloo::rendezvous::Store> make_http_store(const std::string& host, int port, const std::string& scope,
                                                         std::chrono::milliseconds timeout, const std::string& secret);

}  // namespace transport
}  // namespace horovodlite
