// horovodlite for LibTorch C++ programs: everything in one include.
#pragma once

#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/checkpoint.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "horovodlite/torch/fully_shard.h"
#include "horovodlite/torch/optimizer.h"
#include "horovodlite/torch/tensor_util.h"
#include "horovodlite/torch/zero.h"
