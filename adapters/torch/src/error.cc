#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {

HorovodError::HorovodError(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

HorovodError tensor_error(const std::string& name, const Status& status) {
  const std::string& m = status.message();
  if (m.find("'" + name + "'") != std::string::npos) return HorovodError(status.code(), m);
  return HorovodError(status.code(), name + ": " + m);
}

void throw_if_error(const Status& status) {
  if (!status.ok()) throw HorovodError(status);
}

void check_argument(bool condition, const std::string& message) {
  if (!condition) throw HorovodError(StatusCode::kInvalidArgument, message);
}

}  // namespace torch
}  // namespace horovodlite
