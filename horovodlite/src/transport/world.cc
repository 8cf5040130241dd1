#include "transport/world.h"

#if HVL_HAVE_GLOO
#include <dlfcn.h>

#include <mutex>
#include <string>
#endif

namespace horovodlite {
namespace transport {

#if HVL_HAVE_GLOO

namespace {

using ConnectFn = void (*)(const Config*, ContextPtr*, Status*);

// libhorovodlite_gloo.so beside this library, loaded once (never unloaded: its
// contexts' code lives there). Another Gloo already in the process (PyPI's
// torch links its own, of another version, into libtorch_cpu) would take the
// place of Debian's libgloo in the plugin's calls: then the plugin is loaded
// with RTLD_DEEPBIND, so that it and libgloo find each other's symbols first.
Status load_plugin(ConnectFn* fn) {
  static std::once_flag once;
  static ConnectFn loaded = nullptr;
  static std::string error;
  std::call_once(once, [] {
    Dl_info info{};
    std::string dir = ".";
    if (dladdr(reinterpret_cast<void*>(&connect_world), &info) != 0 && info.dli_fname != nullptr) {
      const std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      if (slash != std::string::npos) dir = self.substr(0, slash);
    }
    const std::string path = dir + "/libhorovodlite_gloo.so";
    int flags = RTLD_NOW | RTLD_LOCAL;
    if (dlsym(RTLD_DEFAULT, "_ZN4gloo7Context19createUnboundBufferEPvm") != nullptr) flags |= RTLD_DEEPBIND;
    void* handle = dlopen(path.c_str(), flags);
    if (handle == nullptr) {
      const char* why = dlerror();
      error = "cannot load the Gloo transport " + path + ": " + (why ? why : "unknown error");
      return;
    }
    loaded = reinterpret_cast<ConnectFn>(dlsym(handle, "hvl_gloo_connect_world"));
    if (loaded == nullptr) error = path + " has no hvl_gloo_connect_world";
  });
  *fn = loaded;
  return loaded ? Status::OK() : Status::Unimplemented(error);
}

}  // namespace

Status connect_world(const Config& config, ContextPtr* out) {
  ConnectFn connect = nullptr;
  HVL_RETURN_IF_ERROR(load_plugin(&connect));
  Status s;
  connect(&config, out, &s);
  if (s.ok()) return s;
  const Config::GlooJob& g = config.gloo;
  const std::string where = g.store ? "its launcher's store"
                                    : "the rendezvous at " + g.rendezvous_addr + ":" +
                                          std::to_string(g.rendezvous_port) + " (scope '" + g.scope + "')";
  return Status(s.code(), "init (gloo): rank " + std::to_string(g.rank) + " of " + std::to_string(g.size) +
                              " could not join the job through " + where + " within " +
                              std::to_string(static_cast<int>(g.timeout_s)) +
                              " s (HOROVOD_GLOO_TIMEOUT_SECONDS): " + s.message());
}

bool gloo_transport_built() { return true; }

#else

Status connect_world(const Config&, ContextPtr*) {
  return Status::Unimplemented(
      "this is a Gloo job (HOROVOD_CONTROLLER=gloo, or started by horovodlite-run --gloo), but this build of "
      "horovodlite has no Gloo transport: install libgloo-dev and rebuild (HVL_WITH_GLOO=ON), or start the job "
      "with mpirun");
}

bool gloo_transport_built() { return false; }

#endif

}  // namespace transport
}  // namespace horovodlite
