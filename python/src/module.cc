// horovodlite.torch._C: the pybind11 bridge between the Python package
// horovodlite.torch and the LibTorch adapter. It is deliberately thin: argument
// policy (defaults, Horovod's op semantics, autograd) lives in Python; here we
// only move tensors across, release the GIL while waiting, and turn adapter
// exceptions into Horovod's Python exception types.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "horovodlite/build_info.h"
#include "horovodlite/horovodlite.h"
#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "py_handle.h"

namespace py = pybind11;

namespace horovodlite {
namespace python {
namespace {

// The op's value is one of horovodlite.torch's (_enqueue.py checks it; the core
// validates it again for every caller): converted, not checked, here.
ReduceOp to_reduce_op(int op) { return static_cast<ReduceOp>(op); }

AllreduceOptions allreduce_options(int op, double prescale, double postscale, int process_set_id) {
  AllreduceOptions options;
  options.process_set = ProcessSet(process_set_id);
  options.op = to_reduce_op(op);
  options.prescale_factor = prescale;
  options.postscale_factor = postscale;
  return options;
}

// `output` (out of place only): the tensor to write the result into, e.g. a
// buffer reused from step to step; otherwise a new tensor is allocated.
PyHandle allreduce_async(const at::Tensor& tensor, const std::string& name, int op, double prescale, double postscale,
                         bool in_place, int wire, const std::optional<at::Tensor>& output, int process_set_id) {
  AllreduceOptions options = allreduce_options(op, prescale, postscale, process_set_id);
  // wire (COMPRESSION_NONE/FP16/BF16): float32/float64 are converted to fp16 or
  // bf16 inside the core while being packed for the wire (no 16-bit copy of the
  // tensor), and restored on the way out.
  if (wire != static_cast<int>(horovodlite::Compression::kNone) &&
      wire != static_cast<int>(horovodlite::Compression::kFp16) &&
      wire != static_cast<int>(horovodlite::Compression::kBf16)) {
    throw py::value_error("allreduce_async: unknown wire compression " + std::to_string(wire));
  }
  options.compression = static_cast<horovodlite::Compression>(wire);
  // (_enqueue.py refuses an output with in_place.)
  if (output.has_value()) return PyHandle(torch::allreduce_async(tensor, *output, name, options));
  return PyHandle(in_place ? torch::allreduce_async_(tensor, name, options)
                           : torch::allreduce_async(tensor, name, options));
}

PyHandle reducescatter_async(const at::Tensor& tensor, const std::string& name, int op, double prescale,
                             double postscale, int process_set_id) {
  ReducescatterOptions options;
  options.process_set = ProcessSet(process_set_id);
  options.op = to_reduce_op(op);
  options.prescale_factor = prescale;
  options.postscale_factor = postscale;
  return PyHandle(torch::reducescatter_async(tensor, name, options));
}

std::vector<PyHandle> to_py(std::vector<torch::AsyncHandle> handles) {
  std::vector<PyHandle> out;
  for (auto& h : handles) out.emplace_back(std::move(h));
  return out;
}

// Grouped ops: negotiated and executed as one group (one handle per tensor).
std::vector<PyHandle> grouped_allreduce_async(const std::vector<at::Tensor>& tensors,
                                              const std::vector<std::string>& names, int op, double prescale,
                                              double postscale, bool in_place, int process_set_id) {
  AllreduceOptions options = allreduce_options(op, prescale, postscale, process_set_id);
  return to_py(in_place ? torch::grouped_allreduce_async_(tensors, names, options)
                        : torch::grouped_allreduce_async(tensors, names, options));
}

std::vector<PyHandle> grouped_reducescatter_async(const std::vector<at::Tensor>& tensors,
                                                  const std::vector<std::string>& names, int op, double prescale,
                                                  double postscale, int process_set_id) {
  ReducescatterOptions options;
  options.op = to_reduce_op(op);
  options.prescale_factor = prescale;
  options.postscale_factor = postscale;
  options.process_set = ProcessSet(process_set_id);
  return to_py(torch::grouped_reducescatter_async(tensors, names, options));
}

PyHandle broadcast_async(const at::Tensor& tensor, int root_rank, const std::string& name, bool in_place,
                         int process_set_id) {
  const ProcessSet set(process_set_id);
  return PyHandle(in_place ? torch::broadcast_async_(tensor, root_rank, name, set)
                           : torch::broadcast_async(tensor, root_rank, name, set));
}

// init(comm=..., process_sets=...): `comm_address` is the address of an MPI_Comm
// (mpi4py's MPI._addressof(comm)), 0 for MPI_COMM_WORLD; the core duplicates the
// communicator. `process_sets`: the ranks of each static process set.
void init_with(uintptr_t comm_address, const std::vector<std::vector<int>>& process_sets) {
  InitOptions options;
  if (comm_address != 0) options.mpi_comm = reinterpret_cast<const void*>(comm_address);
  options.process_sets = process_sets;
  torch::throw_if_error(horovodlite::init(options));
}

// Process sets: Python chooses Horovod's exception types, so the status comes back as a value.
py::tuple add_process_set(const std::vector<int>& ranks) {
  ProcessSet set;
  Status s;
  {
    py::gil_scoped_release release;
    s = horovodlite::add_process_set(ranks, &set);
  }
  return py::make_tuple(std::string(status_code_name(s.code())), s.message(), set.id());
}

py::tuple remove_process_set(int process_set_id) {
  Status s;
  {
    py::gil_scoped_release release;
    s = horovodlite::remove_process_set(ProcessSet(process_set_id));
  }
  return py::make_tuple(std::string(status_code_name(s.code())), s.message());
}

std::vector<int> process_set_ids() {
  std::vector<int> ids;
  for (const ProcessSet& set : horovodlite::process_sets()) ids.push_back(set.id());
  return ids;
}

int nccl_version() {
#ifdef HVL_NCCL_VERSION_CODE
  return HVL_NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

void start_timeline(const std::string& path, bool mark_cycles) {
#ifdef HVL_HAVE_TIMELINE
  torch::throw_if_error(horovodlite::start_timeline(path, mark_cycles));
#else
  (void)path;
  (void)mark_cycles;
#endif
}

void stop_timeline() {
#ifdef HVL_HAVE_TIMELINE
  torch::throw_if_error(horovodlite::stop_timeline());
#endif
}

// What horovodlite-run --check-build prints: the core's build information plus
// the LibTorch this module was compiled against.
py::dict build_info() {
  const BuildInfo info = horovodlite::build_info();
  py::dict d;
  d["version"] = info.version;
  d["mpi"] = info.mpi;
  d["mpi_library"] = info.mpi_library;
  d["mpi_version"] = std::to_string(info.mpi_version) + "." + std::to_string(info.mpi_subversion);
  d["cuda"] = info.cuda;
  d["cuda_runtime_version"] = info.cuda_runtime_version;
  d["gloo"] = info.gloo;
  d["nccl_version"] = info.nccl_version;
  d["cpu_avx2_f16c"] = info.cpu_avx2_f16c;
  d["compressions"] = info.compressions;
  d["ring_threshold_bytes"] = info.ring_threshold_bytes;
  d["ring_segment_bytes"] = info.ring_segment_bytes;
  d["torch_built_against"] = TORCH_VERSION;
  return d;
}

}  // namespace
}  // namespace python
}  // namespace horovodlite

PYBIND11_MODULE(_C, m) {
  using namespace horovodlite::python;
  namespace hvt = horovodlite::torch;
  using horovodlite::ProcessSet;
  using horovodlite::ReduceOp;
  m.doc() = "horovodlite's PyTorch bindings (internal; use horovodlite.torch)";

  add_handle_type(m);  // _C.Handle, and HorovodInternalError looked up
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hvt::HorovodError& e) {
      translate_horovod_error(e);
    }
  });

  // ---- lifecycle and topology (GIL released: init/shutdown talk to MPI) ----
  m.def("init", &hvt::init, py::call_guard<py::gil_scoped_release>());
  m.def("init_with", &init_with, py::arg("comm_address"), py::arg("process_sets"),
        py::call_guard<py::gil_scoped_release>());
  m.def("add_process_set", &add_process_set, py::arg("ranks"));
  m.def("remove_process_set", &remove_process_set, py::arg("process_set_id"));
  m.def("process_set_ids", &process_set_ids);
  m.def(
      "process_set_ranks", [](int id) { return ProcessSet(id).ranks(); }, py::arg("process_set_id"));
  m.def(
      "process_set_rank", [](int id) { return ProcessSet(id).rank(); }, py::arg("process_set_id"));
  m.def(
      "process_set_size", [](int id) { return ProcessSet(id).size(); }, py::arg("process_set_id"));
  m.def("shutdown", &hvt::shutdown, py::call_guard<py::gil_scoped_release>());
  m.def("is_initialized", &hvt::is_initialized);
  m.def("rank", &hvt::rank);
  m.def("size", &hvt::size);
  m.def("local_rank", &hvt::local_rank);
  m.def("local_size", &hvt::local_size);
  m.def("cross_rank", &hvt::cross_rank);
  m.def("cross_size", &hvt::cross_size);
  m.def("mpi_threads_supported", &hvt::mpi_threads_supported);
  m.def("nccl_version", &nccl_version);
  m.def("gloo_built", &horovodlite::gloo_built);
  m.def("mpi_built", &horovodlite::mpi_built);
  m.def("mpi_enabled", &horovodlite::mpi_enabled);
  m.def("gloo_enabled", &horovodlite::gloo_enabled);
  m.attr("cuda_built") = horovodlite::cuda_built();  // the core knows (algorithms.cc)
#ifdef HVL_HAVE_TIMELINE
  m.attr("timeline_built") = true;
#else
  m.attr("timeline_built") = false;
#endif
  m.def("start_timeline", &start_timeline, py::arg("file_path"), py::arg("mark_cycles"),
        py::call_guard<py::gil_scoped_release>());
  m.def("stop_timeline", &stop_timeline, py::call_guard<py::gil_scoped_release>());
  m.attr("version") = HVL_VERSION_STRING;
  m.def("build_info", &build_info);
  // The background loop's counters since init (benchmarks: cycles and fused batches per round).
  m.def("stats", []() {
    const horovodlite::Stats s = horovodlite::stats();
    py::dict d;
    d["cycles"] = s.cycles;
    d["negotiations"] = s.negotiations;
    d["cache_hits"] = s.cache_hits;
    d["tensors_negotiated"] = s.tensors_negotiated;
    d["eager_allreduces"] = s.eager_allreduces;
    d["responses_executed"] = s.responses_executed;
    d["fused_tensors"] = s.fused_tensors;
    d["errors"] = s.errors;
    return d;
  });
  m.def("mpi_thread_level_name",
        []() { return std::string(horovodlite::mpi_thread_level_name(horovodlite::mpi_thread_level())); });

  // Reduce op values, as in horovod.common.basics (Average/Sum/Adasum) plus Min/Max/Product.
  m.attr("AVERAGE") = static_cast<int>(ReduceOp::kAverage);
  m.attr("SUM") = static_cast<int>(ReduceOp::kSum);
  m.attr("MIN") = static_cast<int>(ReduceOp::kMin);
  m.attr("MAX") = static_cast<int>(ReduceOp::kMax);
  m.attr("PRODUCT") = static_cast<int>(ReduceOp::kProduct);
  m.attr("ADASUM") = static_cast<int>(ReduceOp::kAdasum);
  // Wire compressions of allreduce_async (the core's Compression).
  m.attr("COMPRESSION_NONE") = static_cast<int>(horovodlite::Compression::kNone);
  m.attr("COMPRESSION_FP16") = static_cast<int>(horovodlite::Compression::kFp16);
  m.attr("COMPRESSION_BF16") = static_cast<int>(horovodlite::Compression::kBf16);

  // ---- collectives; each returns a Handle at once ----
  m.def("allreduce_async", &allreduce_async, py::arg("tensor"), py::arg("name"), py::arg("op"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("in_place"), py::arg("wire") = 0,
        py::arg("output") = py::none(), py::arg("process_set_id") = 0);
  m.def(
      "allgather_async",
      [](const at::Tensor& t, const std::string& name, int process_set_id) {
        return PyHandle(hvt::allgather_async(t, name, ProcessSet(process_set_id)));
      },
      py::arg("tensor"), py::arg("name"), py::arg("process_set_id") = 0);
  m.def("broadcast_async", &broadcast_async, py::arg("tensor"), py::arg("root_rank"), py::arg("name"),
        py::arg("in_place"), py::arg("process_set_id") = 0);
  m.def(
      "alltoall_async",
      [](const at::Tensor& t, const std::vector<int64_t>& splits, const std::string& name, int process_set_id) {
        return PyHandle(hvt::alltoall_async(t, splits, name, ProcessSet(process_set_id)));
      },
      py::arg("tensor"), py::arg("splits"), py::arg("name"), py::arg("process_set_id") = 0);
  m.def("reducescatter_async", &reducescatter_async, py::arg("tensor"), py::arg("name"), py::arg("op"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id") = 0);
  m.def("grouped_allreduce_async", &grouped_allreduce_async, py::arg("tensors"), py::arg("names"), py::arg("op"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("in_place"), py::arg("process_set_id") = 0);
  m.def(
      "grouped_allgather_async",
      [](const std::vector<at::Tensor>& tensors, const std::vector<std::string>& names, int process_set_id) {
        return to_py(hvt::grouped_allgather_async(tensors, names, ProcessSet(process_set_id)));
      },
      py::arg("tensors"), py::arg("names"), py::arg("process_set_id") = 0);
  m.def("grouped_reducescatter_async", &grouped_reducescatter_async, py::arg("tensors"), py::arg("names"),
        py::arg("op"), py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id") = 0);
  m.def("join_async", []() { return PyHandle(hvt::join_async()); });
  // A barrier waits as every Python wait does: interruptible (signals checked every ~100 ms).
  m.def(
      "barrier",
      [](int process_set_id) {
        horovodlite::BarrierOptions options;
        options.process_set = ProcessSet(process_set_id);
        PyHandle(hvt::AsyncHandle(horovodlite::barrier_async(options), nullptr)).synchronize();
      },
      py::arg("process_set_id") = 0);
  m.def("abort_job_if_failed", &horovodlite::abort_job_if_failed);
  // Python's exit handlers run before MPI is finalized (by horovodlite's C
  // at-exit handler, or by mpi4py's Py_AtExit one): after a failure that left the
  // other ranks out of step, end the job there instead of waiting for them.
  py::module_::import("atexit").attr("register")(m.attr("abort_job_if_failed"));
  m.def("reducescatter_rows", &horovodlite::reducescatter_rows, py::arg("dim0"), py::arg("world_size"),
        py::arg("rank"));
}
