// The adapter boundary: a failed core Status becomes a HorovodError exception
// that carries the StatusCode, so bindings can map it (kDuplicateName and
// kInvalidArgument -> ValueError, others -> HorovodInternalError).
#pragma once

#include <stdexcept>
#include <string>

#include "horovodlite/common.h"

namespace horovodlite {
namespace torch {

class HorovodError : public std::runtime_error {
 public:
  HorovodError(StatusCode code, const std::string& message);
  explicit HorovodError(const Status& status) : HorovodError(status.code(), status.message()) {}

  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// The error of the op on tensor `name` that failed with `status`: its message
// prefixed with "name: ", unless it already names the tensor ('name'), as the
// core's argument checks do.
HorovodError tensor_error(const std::string& name, const Status& status);

// Throws HorovodError if `status` failed; returns otherwise.
void throw_if_error(const Status& status);

// Throws HorovodError(kInvalidArgument, message) unless `condition` holds.
void check_argument(bool condition, const std::string& message);

}  // namespace torch
}  // namespace horovodlite
