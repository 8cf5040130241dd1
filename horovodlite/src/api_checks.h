// The API's argument checks that need nothing but the arguments (api.cc adds
// those that ask the runtime, e.g. a process set's size).
#pragma once

#include <string>

#include "horovodlite/horovodlite.h"

namespace horovodlite {

// dtype, rank, element count (fits a 64-bit byte count), data and device of
// `what` ("input"/"output") of the op `name`.
Status check_tensor(const std::string& name, const TensorView& t, const char* what);

// The reduce op is valid for the dtype and the scale factors are finite.
Status check_scaling(const std::string& name, DataType dtype, ReduceOp op, double pre, double post);

}  // namespace horovodlite
