#include "mpi/mpi_transport.h"

#include <climits>
#include <functional>
#include <thread>

#include "mpi/mpi_util.h"

namespace horovodlite {
namespace transport {

namespace {

int comm_rank(MPI_Comm c) {
  int r = 0;
  if (c != MPI_COMM_NULL) MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 1;
  if (c != MPI_COMM_NULL) MPI_Comm_size(c, &s);
  return s;
}

std::vector<int> world_ranks_of(MPI_Comm c) {
  const int n = comm_size(c);
  std::vector<int> ranks(static_cast<size_t>(n)), world(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  if (c == MPI_COMM_NULL) return ranks;
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  MPI_Comm_group(c, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  MPI_Group_translate_ranks(g, n, ranks.data(), wg, world.data());
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  return world;
}

class MpiRequest : public Request {
 public:
  MpiRequest(int peer, int tag, bool send) : Request(peer, tag, send) {}
  ~MpiRequest() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  Status test(bool* done) override {
    int flag = 1;
    if (request_ != MPI_REQUEST_NULL) {
      const int rc = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        return mpi_status(rc, is_send() ? ("MPI_Test (send to rank " + std::to_string(peer()) + ")").c_str()
                                        : ("MPI_Test (receive from rank " + std::to_string(peer()) + ")").c_str());
      }
    }
    *done = flag != 0;
    return Status::OK();
  }
  MPI_Request request_ = MPI_REQUEST_NULL;
};

Status check_args(size_t bytes, int peer, int size, int tag) {
  if (peer < 0 || peer >= size) {
    return Status::InvalidArgument("transport: peer " + std::to_string(peer) + " outside [0, " + std::to_string(size) +
                                   ")");
  }
  if (tag < 0 || tag > kMaxTag)
    return Status::InvalidArgument("transport: tag " + std::to_string(tag) + " out of range");
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("transport: a message of " + std::to_string(bytes) + " bytes exceeds MPI's count");
  }
  return Status::OK();
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, bool owned, Topology topology)
    : Context(comm_rank(comm), comm_size(comm), std::move(topology), world_ranks_of(comm)),
      comm_(comm),
      owned_(owned) {}

MpiTransport::~MpiTransport() {
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiTransport::create(MPI_Comm comm, bool owned, std::shared_ptr<MpiTransport>* out) {
  if (comm == MPI_COMM_NULL) return Status::InvalidArgument("transport: MPI_COMM_NULL");
  // A host is named by the lowest world rank of its shared-memory group.
  MPI_Comm shared = MPI_COMM_NULL;
  HVL_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  int me = comm_rank(comm), lowest = 0;
  const int rc = MPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_free(&shared);
  HVL_MPI_CHECK_AS(rc, "MPI_Allreduce (transport topology)");
  std::vector<int> keys(static_cast<size_t>(comm_size(comm)));
  HVL_MPI_CHECK(MPI_Allgather(&lowest, 1, MPI_INT, keys.data(), 1, MPI_INT, comm));
  std::vector<std::string> names;
  for (int k : keys) names.push_back(std::to_string(k));
  *out = std::make_shared<MpiTransport>(comm, owned, Topology::from_names(names));
  return Status::OK();
}

Status MpiTransport::isend(const void* buf, size_t bytes, int peer, int tag, RequestPtr* request) {
  HVL_RETURN_IF_ERROR(check_args(bytes, peer, size_, tag));
  auto r = std::make_unique<MpiRequest>(peer, tag, true);
  HVL_MPI_CHECK(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r->request_));
  *request = std::move(r);
  return Status::OK();
}

Status MpiTransport::irecv(void* buf, size_t bytes, int peer, int tag, RequestPtr* request) {
  HVL_RETURN_IF_ERROR(check_args(bytes, peer, size_, tag));
  auto r = std::make_unique<MpiRequest>(peer, tag, false);
  HVL_MPI_CHECK(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r->request_));
  *request = std::move(r);
  return Status::OK();
}

Status MpiTransport::barrier(std::chrono::milliseconds timeout) {
  MPI_Request r = MPI_REQUEST_NULL;
  HVL_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  if (timeout == kNoTimeout) return mpi_wait(&r, "MPI_Ibarrier (transport)");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int done = 0;
  while (true) {
    HVL_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return Status::OK();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout("transport: MPI barrier not reached by every rank within " +
                             std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status MpiTransport::split(const std::vector<int>& ranks, const std::string& name, std::shared_ptr<Context>* out) {
  for (int r : ranks) {
    if (r < 0 || r >= size_) return Status::InvalidArgument("transport: split over rank " + std::to_string(r));
  }
  MPI_Group group = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  HVL_MPI_CHECK(MPI_Comm_group(comm_, &group));
  int rc = MPI_Group_incl(group, static_cast<int>(ranks.size()), ranks.data(), &sub);
  MPI_Group_free(&group);
  HVL_MPI_CHECK_AS(rc, "MPI_Group_incl (transport split)");
  MPI_Comm comm = MPI_COMM_NULL;
  const int tag = static_cast<int>(std::hash<std::string>{}(name) % static_cast<size_t>(kMaxTag));
  rc = MPI_Comm_create_group(comm_, sub, tag, &comm);
  MPI_Group_free(&sub);
  HVL_MPI_CHECK_AS(rc, "MPI_Comm_create_group (transport split)");
  if (comm == MPI_COMM_NULL) return Status::InvalidArgument("transport: split '" + name + "' without this rank");
  *out = std::make_shared<MpiTransport>(comm, true, sub_topology(topology_, ranks));
  return Status::OK();
}

}  // namespace transport
}  // namespace horovodlite
