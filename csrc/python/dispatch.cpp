// Validation, selection and launch of native kernels. The hot path is PreparedLaunch (prepared_launch.hpp): shapes,
// strides, dtypes and devices are fixed when a decision is cached, so a call passes only its data pointers.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/byte_span.hpp"
#include "bindings.hpp"
#include "dlpack_exchange.hpp"
#include "errors.hpp"
#include "prepared_launch.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

const char* pick_reason_name(kabi_pick_reason reason) {
  switch (reason) {
    case KABI_PICK_FORCED:
      return "forced";
    case KABI_PICK_TUNED:
      return "tuned";
    case KABI_PICK_HEURISTIC:
      return "heuristic";
    case KABI_PICK_NONE:
      break;
  }
  return "none";
}

const char* gate_verdict_name(kabi_gate_verdict verdict) {
  switch (verdict) {
    case KABI_GATE_PASSED_TIMED:
      return "passed, timed";
    case KABI_GATE_PASSED_UNTIMED:
      return "passed, untimed";
    case KABI_GATE_FAILED:
      return "failed";
    case KABI_GATE_NONE:
      break;
  }
  return "none";
}

const char* execution_mode_name(kabi_execution_mode mode) {
  return mode == KABI_EXECUTION_GRAPH ? "graph" : "eager";
}

kabi_execution_mode execution_mode_from_name(const std::string& name) {
  if (name == "eager") return KABI_EXECUTION_EAGER;
  if (name == "graph") return KABI_EXECUTION_GRAPH;
  raise_status(KABI_STATUS_INVALID_ARGUMENT, "execution_mode must be \"eager\" or \"graph\", got \"" + name + "\"");
}

py::dict describe(const std::string& op_name, const py::sequence& inputs, const py::sequence& outputs,
                  const py::sequence& attributes) {
  kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, attributes);
  kabi_problem problem{};
  problem.struct_size = sizeof(problem);
  check(kabi_problem_describe(op, &tensors.args(), &problem));
  return problem_to_dict(op, problem);
}

// Select a kernel; with allow_none, a problem no kernel can run still returns the candidates (kernel None and
// "error" holding libkabi's message) so that explain can show every rejection. Without with_rejected, only the
// candidates that are eligible or picked are returned: where a GPU's backends register hundreds of kernels of an op,
// most are rejected by their dtype or layout, and their records cost most of a selection.
py::dict select(const std::string& op_name, const py::sequence& inputs, const py::sequence& outputs,
                const std::optional<std::string>& force, bool use_environment, bool use_tuning_cache,
                bool allow_unverified, bool allow_failed_gate, bool allow_none, const py::sequence& attributes,
                const std::string& execution_mode, bool with_rejected) {
  kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, attributes);
  kabi_select_options options{};
  options.struct_size = sizeof(options);
  options.force = force ? force->c_str() : nullptr;
  options.use_environment = use_environment ? 1 : 0;
  options.use_tuning_cache = use_tuning_cache ? 1 : 0;
  options.allow_unverified = allow_unverified ? 1 : 0;
  options.allow_failed_gate = allow_failed_gate ? 1 : 0;
  options.execution_mode = execution_mode_from_name(execution_mode);

  // Room for every kernel of the op, so one selection fills it: a selection reruns every candidate's filters and
  // supports predicates, and a call that came back asking for more room paid for that twice. It loops only when a
  // kernel is registered in between.
  std::vector<kabi_candidate> candidates(static_cast<std::size_t>(std::max(kabi_kernel_count(op_name.c_str()), 1)));
  kabi_selection selection{};
  kabi_status status = KABI_STATUS_OK;
  for (;;) {
    for (auto& candidate : candidates) {
      candidate = kabi_candidate{};
      candidate.struct_size = sizeof(kabi_candidate);
    }
    selection = kabi_selection{};
    selection.struct_size = sizeof(selection);
    selection.problem.struct_size = sizeof(kabi_problem);
    selection.candidates = candidates.data();
    selection.candidates_capacity = static_cast<int32_t>(candidates.size());
    status = kabi_select(op, &tensors.args(), &options, &selection);
    if (selection.num_candidates <= selection.candidates_capacity) break;
    candidates.resize(static_cast<std::size_t>(selection.num_candidates));
  }
  std::string error;
  if (status != KABI_STATUS_OK) {
    if (!(allow_none && status == KABI_STATUS_NO_ELIGIBLE_KERNEL)) raise_status(status);
    error = kabi_last_error();
  }

  py::dict result;
  result["kernel"] = selection.kernel != nullptr ? py::object(kernel_to_dict(selection.kernel)) : py::none();
  result["pick_reason"] = pick_reason_name(selection.pick_reason);
  result["reason"] = py::str(selection.reason);
  result["error"] = error;
  result["verified"] = selection.verified != 0;
  py::list candidate_list;
  for (int32_t i = 0; i < selection.num_candidates; ++i) {
    const kabi_candidate& candidate = candidates[static_cast<std::size_t>(i)];
    if (candidate.kernel == nullptr || !(with_rejected || candidate.eligible || candidate.picked)) continue;
    py::dict entry = kernel_to_dict(candidate.kernel);
    entry["eligible"] = candidate.eligible != 0;
    entry["picked"] = candidate.picked != 0;
    entry["tuned_time_us"] = candidate.tuned_time_us >= 0 ? py::object(py::float_(candidate.tuned_time_us))
                                                          : py::object(py::none());
    entry["reason"] = py::str(candidate.reason);
    entry["gate"] = gate_verdict_name(candidate.gate);
    entry["tuned_execution_mode"] = execution_mode_name(static_cast<kabi_execution_mode>(candidate.tuned_execution_mode));
    entry["tuned_screened"] = candidate.tuned_screened != 0;
    entry["variant"] = py::str(candidate.variant);
    entry["stale_variant"] = candidate.has_stale_record != 0 ? py::object(py::str(candidate.stale_variant))
                                                             : py::object(py::none());
    candidate_list.append(entry);
  }
  result["candidates"] = candidate_list;
  // A selection that found nothing still describes its problem; one that failed validation has none.
  result["problem"] = status == KABI_STATUS_OK || selection.problem.num_outputs > 0
                          ? py::object(problem_to_dict(op, selection.problem))
                          : py::object(py::none());
  return result;
}

// The op's KABI_FORCE choice as the core reads it (None when none), so Python never parses the variable itself.
std::optional<std::string> environment_force(const std::string& op_name) {
  char choice[1024] = {};
  check(kabi_op_environment_force(find_op(op_name), choice, sizeof choice));
  if (choice[0] == '\0') return std::nullopt;
  return std::string(choice);
}

void launch(const std::string& op_name, const std::string& kernel_name, const py::sequence& inputs,
            const py::sequence& outputs, std::uintptr_t stream, const py::sequence& attributes) {
  kabi_kernel kernel = find_kernel(op_name, kernel_name);
  CallTensors tensors(find_op(op_name), inputs, outputs, stream, attributes);
  kabi_status status;
  {
    py::gil_scoped_release release;
    status = kabi_launch(kernel, &tensors.args());
  }
  check(status);
}

// The core's rule for the implementations that run without the core (Python kernels, torch's own): an output whose
// bytes overlap an input's is refused, naming both. Any strides, as a caller's `out` may have.
void check_outputs_do_not_alias_inputs(const std::string& op_name, const py::sequence& inputs,
                                       const py::sequence& outputs) {
  const kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, py::tuple());
  const kabi_args& args = tensors.args();
  for (int32_t o = 0; o < args.num_outputs; ++o) {
    const int32_t input = core::aliased_input(args.outputs[o], args.inputs, args.num_inputs);
    if (input < 0) continue;
    kabi_tensor_decl output_decl{sizeof(kabi_tensor_decl)};
    kabi_tensor_decl input_decl{sizeof(kabi_tensor_decl)};
    check(kabi_op_tensor_get(op, args.num_inputs + o, &output_decl));
    check(kabi_op_tensor_get(op, input, &input_decl));
    raise_status(KABI_STATUS_INVALID_ARGUMENT, core::aliasing_message(op_name, output_decl.name, input_decl.name));
  }
}

}  // namespace

void bind_dispatch(py::module_& m) {
  m.def("describe", &describe, py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::tuple(),
        py::arg("attributes") = py::tuple(),
        "Validate a call (tensor descriptors, None for an absent optional input; attribute values in schema order) "
        "against its op and return the problem as a dict.");
  m.def("select", &select, py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::tuple(),
        py::arg("force") = py::none(), py::arg("use_environment") = true, py::arg("use_tuning_cache") = true,
        py::arg("allow_unverified") = false, py::arg("allow_failed_gate") = false, py::arg("allow_none") = false,
        py::arg("attributes") = py::tuple(), py::arg("execution_mode") = "eager", py::arg("with_rejected") = true,
        "Pick a kernel for a call run eagerly or replayed in a CUDA graph (execution_mode \"eager\" or \"graph\"): "
        "a dict with kernel (info dict or None), pick_reason, reason, error, verified (the pick passed the "
        "correctness gate), candidates (each with its gate verdict, the mode of its tuned time, the variant it runs "
        "and the variant of a record set aside as stale, or None; without with_rejected only the eligible ones and "
        "the pick), problem.");
  m.def("environment_force", &environment_force, py::arg("op"),
        "The op's choice in KABI_FORCE as selection applies it, or None; InvalidArgumentError for a malformed "
        "value or an op named twice.");
  m.def("check_outputs_do_not_alias_inputs", &check_outputs_do_not_alias_inputs, py::arg("op"), py::arg("inputs"),
        py::arg("outputs"),
        "InvalidArgumentError naming the output and the input when an output descriptor's bytes overlap an input's "
        "on the same device (the core's rule, for implementations that run without it).");
  m.def("launch", &launch, py::arg("op"), py::arg("kernel"), py::arg("inputs"), py::arg("outputs"),
        py::arg("stream") = 0, py::arg("attributes") = py::tuple(),
        "Run a native kernel on tensor descriptors (outputs allocated by the caller).");
  m.def("registry_generation", &kabi_registry_generation,
        "A counter that changes with every change to ops, kernels or the tuning cache.");
  m.def(
      "op_generation", [](const std::string& op_name) { return kabi_op_generation(find_op(op_name)); },
      py::arg("op"),
      "A counter that changes with every change that can alter the op's selections (its kernels, its tuning "
      "records, the tuning cache as a whole), and with no other.");
  py::class_<PreparedLaunch>(m, "PreparedLaunch",
                             "A native kernel bound to one problem; call it with the tensors (inputs, then outputs).")
      .def(py::init<const std::string&, const std::string&, const py::sequence&, const py::sequence&,
                    std::uintptr_t, const py::sequence&>(),
           py::arg("op"), py::arg("kernel"), py::arg("inputs"), py::arg("outputs"), py::arg("stream") = 0,
           py::arg("attributes") = py::tuple())
      .def("__call__", &PreparedLaunch::operator())
      .def("on_stream", &PreparedLaunch::on_stream, py::arg("stream"),
           "Launch on a CUstream (an integer) instead of the one given at preparation.")
      .def("on_current_stream", &PreparedLaunch::on_current_stream,
           "Launch on the current stream of the tensors' framework (through its DLPack exchange API).")
      .def_property_readonly("kernel", &PreparedLaunch::kernel_name);
}

}  // namespace kabi::python
