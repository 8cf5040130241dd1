#include "mpi/mpi_util.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace horovodlite {

Status mpi_status(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::Internal(std::string(call) + " failed: " + std::string(msg, len));
}

Status mpi_call_status(int rc, const char* call_text) {
  if (rc == MPI_SUCCESS) return Status::OK();
  const std::string text(call_text);
  return mpi_status(rc, text.substr(0, text.find('(')).c_str());
}

namespace {
template <typename T>
T read_as(const unsigned char* bytes) {
  T v;
  std::memcpy(&v, bytes, sizeof(T));
  return v;
}

int64_t read_control_variable(const char* name) {
  // Open MPI 4.1's MPI_T_init_thread stores the level it is asked for as the
  // library's thread level (ompi_mpi_thread_level): asking for less than
  // MPI_Init_thread provided would turn off its MPI_THREAD_MULTIPLE handling
  // for the rest of the job (MPI_Query_thread then says MPI_THREAD_SINGLE).
  // Ask for the level MPI already has.
  int level = MPI_THREAD_SINGLE;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Query_thread(&level);
  int provided = 0;
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return 0;
  int64_t out = 0;
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS && index >= 0) {
    char cvar_name[256], desc[1024];
    int name_len = sizeof(cvar_name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_get_info(index, cvar_name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind,
                            &scope) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1) {
        alignas(8) unsigned char value[16] = {};  // room for any integer type
        if (MPI_T_cvar_read(handle, value) == MPI_SUCCESS) {
          if (type == MPI_UNSIGNED_LONG) {
            out = static_cast<int64_t>(read_as<unsigned long>(value));
          } else if (type == MPI_UNSIGNED_LONG_LONG) {
            out = static_cast<int64_t>(read_as<unsigned long long>(value));
          } else if (type == MPI_INT) {
            out = read_as<int>(value);
          } else if (type == MPI_UNSIGNED) {
            out = read_as<unsigned>(value);
          }
        }
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return std::max<int64_t>(0, out);
}
}  // namespace

int64_t mpi_control_variable(const char* name) {
  // Read once per process and kept: MCA parameters are fixed once MPI is
  // initialised, and each MPI_T_init_thread of Open MPI 4.1 opens every
  // component of every framework to register its variables (dlopen, library
  // constructors and all; MPI_T_finalize closes them again). Every init of
  // horovodlite reads these limits: reading them anew each time took as many
  // loads, and one of them (libfabric's PSM2 provider, under mca_mtl_ofi)
  // sometimes sleeps in its constructor for tens of seconds, which stalled a
  // rank while its peers waited in the negotiation (docs/multihost.md).
  static std::mutex mu;
  static std::vector<std::pair<std::string, int64_t>> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [n, v] : known)
    if (n == name) return v;
  const int64_t v = read_control_variable(name);
  known.emplace_back(name, v);
  return v;
}

Status mpi_wait(MPI_Request* request, const char* what, int max_sleep_us) {
  int done = 0;
  int attempts = 0;
  int sleep_us = 2;
  while (true) {
    HVL_MPI_CHECK_AS(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    if (done) return Status::OK();
    ++attempts;
    if (attempts < 32) continue;  // a few microseconds: the peer is usually close behind
    if (attempts < 64) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, max_sleep_us);
  }
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace horovodlite
