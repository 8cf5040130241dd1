// The in-process transport: threads as ranks, for tests (as Gloo's
// test/base_test.h spawns one thread per rank). A send completes when the
// receiver has posted the matching receive and the bytes have been copied
// (no eager buffering), so a schedule that deadlocks on a real transport
// deadlocks here too, and a wait's timeout names the peer.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace horovodlite {
namespace transport {

struct InProcWorldState;

// Creates `size` connected contexts (rank r is element r), on `topology`'s hosts
// (one host when empty).
std::vector<ContextPtr> make_inproc_world(int size, Topology topology = {});

// Runs fn(context) on one thread per rank of a new world and joins them.
void run_inproc_ranks(int size, const std::function<void(Context&)>& fn, Topology topology = {});

}  // namespace transport
}  // namespace horovodlite
