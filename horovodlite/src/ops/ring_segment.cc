#include "ops/ring_segment.h"

#include <algorithm>
#include <cstring>

#include "mpi_context.h"

namespace horovodlite {

namespace {

template <typename T>
T read_as(const unsigned char* bytes) {
  T v;
  std::memcpy(&v, bytes, sizeof(T));
  return v;
}

}  // namespace

int64_t tcp_eager_limit_bytes() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return 0;
  int64_t limit = 0;
  int index = -1;
  if (MPI_T_cvar_get_index("btl_tcp_eager_limit", &index) == MPI_SUCCESS && index >= 0) {
    char name[256], desc[1024];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind, &scope) ==
            MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1) {
        alignas(8) unsigned char value[16] = {};  // room for any integer type
        if (MPI_T_cvar_read(handle, value) == MPI_SUCCESS) {
          if (type == MPI_UNSIGNED_LONG) {
            limit = static_cast<int64_t>(read_as<unsigned long>(value));
          } else if (type == MPI_UNSIGNED_LONG_LONG) {
            limit = static_cast<int64_t>(read_as<unsigned long long>(value));
          } else if (type == MPI_INT) {
            limit = read_as<int>(value);
          } else if (type == MPI_UNSIGNED) {
            limit = read_as<unsigned>(value);
          }
        }
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return std::max<int64_t>(0, limit);
}

Status ring_segment_bytes(MPI_Comm comm, int64_t configured, bool crosses_hosts, int64_t* out) {
  *out = configured;
  if (!crosses_hosts) return Status::OK();
  // 0 (unknown) on any rank: keep the configured size everywhere.
  int64_t limit = tcp_eager_limit_bytes();
  HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, &limit, 1, MPI_INT64_T, MPI_MIN, comm), "MPI_Allreduce (ring segment)");
  if (limit <= 0) return Status::OK();
  const int64_t eager = (limit - 64) / 64 * 64;
  if (eager >= 64) *out = std::min(configured, eager);
  return Status::OK();
}

}  // namespace horovodlite
