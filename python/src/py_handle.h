// Handles as Python sees them (horovodlite.torch._C.Handle), and the translation
// of the adapter's exceptions into Horovod's Python exception types.
//
// _C.Handle is a plain CPython type holding a PyHandle, not a pybind11 class:
// every *_async call returns one, and a pybind11 instance costs its holder
// allocation and its entry in pybind11's global table of registered instances
// to make and as much to free, a visible share of a per-tensor loop of
// allreduce_async_ calls (docs/performance.md). The
// type_caster below lets every binding keep returning PyHandle (or a vector of
// them) and get these objects.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace python {

// An AsyncHandle for Python: synchronize() and wait() wait without the GIL, so
// that other Python threads (and the background thread's completion
// callbacks) run, and wake every 100 ms to let Python handle signals (Ctrl-C).
class PyHandle {
 public:
  // Errors the core reports at enqueue time (duplicate name, bad argument, not
  // initialised or shut down) are raised by the *_async call itself, as Horovod
  // does; errors found during negotiation are raised by synchronize().
  explicit PyHandle(torch::AsyncHandle handle);

  bool poll() const { return handle_.poll(); }
  at::Tensor synchronize() const;
  bool wait(double timeout_s) const;
  const std::string& name() const { return handle_.name(); }
  std::vector<int64_t> received_splits() const { return handle_.received_splits(); }
  int last_joined_rank() const { return handle_.last_joined_rank(); }

 private:
  torch::AsyncHandle handle_;
};

// Sets the Python exception for a HorovodError: ValueError for bad arguments
// and names, NotImplementedError, else horovodlite's HorovodInternalError.
void translate_horovod_error(const torch::HorovodError& e);

// Once, at module import: looks up HorovodInternalError, readies the Handle
// type and adds it to the module as `Handle`.
void add_handle_type(pybind11::module_& m);

// A new reference to a _C.Handle holding `handle`; nullptr with a Python error set on failure.
PyObject* wrap_handle(PyHandle&& handle);

}  // namespace python
}  // namespace horovodlite

namespace pybind11 {
namespace detail {

// PyHandle results become _C.Handle objects (never taken as arguments).
template <>
struct type_caster<horovodlite::python::PyHandle> {
  static constexpr auto name = const_name("horovodlite.torch._C.Handle");
  bool load(handle, bool) { return false; }
  static handle cast(horovodlite::python::PyHandle&& h, return_value_policy, handle) {
    PyObject* o = horovodlite::python::wrap_handle(std::move(h));
    if (o == nullptr) throw error_already_set();
    return o;
  }
  static handle cast(const horovodlite::python::PyHandle& h, return_value_policy p, handle parent) {
    return cast(horovodlite::python::PyHandle(h), p, parent);
  }
};

}  // namespace detail
}  // namespace pybind11
