#include "py_handle.h"

#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <utility>

#include "horovodlite/horovodlite.h"

namespace py = pybind11;

namespace horovodlite {
namespace python {
namespace {

// horovodlite.common.exceptions.HorovodInternalError, looked up at import time.
// Leaked on purpose: it must outlive every translated exception, and Python
// objects must not be released after the interpreter has gone.
PyObject* g_internal_error = nullptr;

// How often a wait from Python wakes to run Python's signal handlers.
constexpr std::chrono::milliseconds kSignalCheckInterval{100};

// The wait for `core` was interrupted (a signal handler raised, e.g.
// KeyboardInterrupt on Ctrl-C) before the op completed. The op cannot be
// withdrawn from the other ranks (they may have submitted it, or be running it),
// and leaving it in flight would let it complete later into a tensor the program
// has moved on from. So horovodlite shuts down on every rank, cleanly, through
// the next negotiation cycle: this op and every op in flight fail with
// HorovodInternalError, later ops too, until shutdown() and init() start afresh
// (docs/reliability.md, "Interrupting a wait").
void abandon(const HandlePtr& core) {
  std::fprintf(stderr,
               "[horovodlite warning rank %d] the wait for '%s' was interrupted; the operation cannot be withdrawn "
               "from the other ranks, so horovodlite shuts down on every rank (operations in flight fail; call "
               "shutdown() and init() to start again)\n",
               horovodlite::rank(), core->name().c_str());
  std::fflush(stderr);
  horovodlite::request_shutdown();
}

// Waits for `core` without the GIL, at most until `deadline` (nullopt: until it
// completes), waking every kSignalCheckInterval to run Python's signal handlers
// with the GIL. If a handler raises, abandons the op and raises that exception.
// Returns whether the op completed.
bool wait_checking_signals(const HandlePtr& core, std::optional<std::chrono::steady_clock::time_point> deadline) {
  using Clock = std::chrono::steady_clock;
  while (true) {
    auto slice = kSignalCheckInterval;
    if (deadline) {
      const Clock::time_point now = Clock::now();
      if (now >= *deadline) return core->poll();
      slice = std::min(slice, std::chrono::ceil<std::chrono::milliseconds>(*deadline - now));
    }
    {
      py::gil_scoped_release release;
      // Returns as soon as the op completes; its outcome is read through poll()
      // and the handle's status below, so the wait's own status adds nothing.
      static_cast<void>(core->wait(slice));
    }
    if (core->poll()) return true;
    if (PyErr_CheckSignals() != 0) {
      if (!core->poll()) abandon(core);
      throw py::error_already_set();
    }
  }
}

// ---- the Python type ----

struct HandleObject {
  PyObject_HEAD PyHandle handle;
};

PyHandle& of(PyObject* self) { return reinterpret_cast<HandleObject*>(self)->handle; }

// Runs `fn` (which returns a new reference), turning a C++ exception into the
// Python exception pybind11's bindings would raise for it.
template <typename Fn>
PyObject* guarded(Fn&& fn) {
  try {
    return fn();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const torch::HorovodError& e) {
    translate_horovod_error(e);
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

void handle_dealloc(PyObject* self) {
  of(self).~PyHandle();
  Py_TYPE(self)->tp_free(self);
}

PyObject* handle_poll(PyObject* self, PyObject*) {
  return guarded([&] { return py::bool_(of(self).poll()).release().ptr(); });
}

PyObject* handle_synchronize(PyObject* self, PyObject*) {
  return guarded([&] { return py::cast(of(self).synchronize()).release().ptr(); });
}

PyObject* handle_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return guarded([&]() -> PyObject* {
    static const char* const usage = "Handle.wait(timeout_s): one number, the seconds to wait";
    // One argument, by position or as timeout_s= (a keyword's value follows the positional ones: args[0] either way).
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    const bool by_keyword =
        nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout_s") == 0;
    if (nargs + nkw != 1 || (nkw == 1 && !by_keyword)) {
      PyErr_SetString(PyExc_TypeError, usage);
      return nullptr;
    }
    const double seconds = PyFloat_AsDouble(args[0]);
    if (seconds == -1.0 && PyErr_Occurred()) return nullptr;
    return py::bool_(of(self).wait(seconds)).release().ptr();
  });
}

PyObject* handle_received_splits(PyObject* self, PyObject*) {
  return guarded([&] { return py::cast(of(self).received_splits()).release().ptr(); });
}

PyObject* handle_last_joined_rank(PyObject* self, PyObject*) {
  return guarded([&] { return PyLong_FromLong(of(self).last_joined_rank()); });
}

PyObject* handle_name(PyObject* self, void*) {
  return guarded([&] { return py::str(of(self).name()).release().ptr(); });
}

PyObject* handle_repr(PyObject* self) {
  return guarded([&] {
    return py::str("<horovodlite handle '" + of(self).name() + "'" + (of(self).poll() ? " completed>" : ">"))
        .release()
        .ptr();
  });
}

PyMethodDef g_methods[] = {
    {"poll", handle_poll, METH_NOARGS, "poll()\n--\n\nTrue once the operation has completed (never blocks)."},
    {"synchronize", handle_synchronize, METH_NOARGS,
     "synchronize()\n--\n\nWaits for the operation and returns its result; raises if it failed."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(handle_wait)), METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout_s)\n--\n\nWaits at most timeout_s seconds; True if the operation has completed."},
    {"received_splits", handle_received_splits, METH_NOARGS,
     "received_splits()\n--\n\nalltoall: the rows received from each rank."},
    {"last_joined_rank", handle_last_joined_rank, METH_NOARGS,
     "last_joined_rank()\n--\n\njoin: the last rank to join."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef g_getset[] = {{"name", handle_name, nullptr, "The operation's name.", nullptr},
                          {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject g_handle_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace

PyHandle::PyHandle(torch::AsyncHandle handle) : handle_(std::move(handle)) {
  const HandlePtr& core = handle_.core_handle();
  if (core->poll()) {
    Status status = core->status();
    switch (status.code()) {
      case StatusCode::kDuplicateName:
      case StatusCode::kInvalidArgument:
      case StatusCode::kPrecondition:
      case StatusCode::kUnimplemented:
        throw torch::tensor_error(core->name(), status);
      default:
        break;
    }
  }
}

at::Tensor PyHandle::synchronize() const {
  const HandlePtr& core = handle_.core_handle();
  // Wait for completion without the GIL, waking to run signal handlers; errors
  // are raised below, with it. (A completed op skips the GIL hand-off.)
  if (!core->poll()) wait_checking_signals(core, std::nullopt);
  // Completion is now known, so this does not block; it runs the finisher
  // (copy back into non-contiguous in-place targets) and throws on failure.
  return handle_.synchronize();
}

bool PyHandle::wait(double timeout_s) const {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  return wait_checking_signals(handle_.core_handle(), std::chrono::steady_clock::now() + timeout);
}

void translate_horovod_error(const torch::HorovodError& e) {
  switch (e.code()) {
    case StatusCode::kDuplicateName:
    case StatusCode::kInvalidArgument:
      PyErr_SetString(PyExc_ValueError, e.what());
      return;
    case StatusCode::kUnimplemented:
      PyErr_SetString(PyExc_NotImplementedError, e.what());
      return;
    default:
      PyErr_SetString(g_internal_error != nullptr ? g_internal_error : PyExc_RuntimeError, e.what());
      return;
  }
}

void add_handle_type(py::module_& m) {
  py::object exceptions = py::module_::import("horovodlite.common.exceptions");
  g_internal_error = py::object(exceptions.attr("HorovodInternalError")).release().ptr();
  g_handle_type.tp_name = "horovodlite.torch._C.Handle";
  g_handle_type.tp_basicsize = sizeof(HandleObject);
  g_handle_type.tp_dealloc = handle_dealloc;
  g_handle_type.tp_repr = handle_repr;
  g_handle_type.tp_flags = Py_TPFLAGS_DEFAULT;
  g_handle_type.tp_doc = "The handle of an asynchronous horovodlite operation (returned by the *_async functions).";
  g_handle_type.tp_methods = g_methods;
  g_handle_type.tp_getset = g_getset;
  if (PyType_Ready(&g_handle_type) != 0) throw py::error_already_set();
  Py_INCREF(&g_handle_type);  // the module's reference; the static type is never freed
  m.attr("Handle") = py::handle(reinterpret_cast<PyObject*>(&g_handle_type));
}

PyObject* wrap_handle(PyHandle&& handle) {
  PyObject* o = g_handle_type.tp_alloc(&g_handle_type, 0);
  if (o == nullptr) return nullptr;
  new (&of(o)) PyHandle(std::move(handle));
  return o;
}

}  // namespace python
}  // namespace horovodlite
