#pragma once
// The optim layer: SGD, AdamW, LAMB, clipping by the global gradient norm, learning-rate schedules, loss scaling, gradient buffers, checkpoints.
#include "tessera/optim/adamw.hpp"
#include "tessera/optim/checkpoint.hpp"
#include "tessera/optim/clip.hpp"
#include "tessera/optim/gradient_buffer.hpp"
#include "tessera/optim/lamb.hpp"
#include "tessera/optim/loss_scaler.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/optim/schedule.hpp"
#include "tessera/optim/sgd.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/square_sum.hpp"
#include "tessera/optim/weight_rounding.hpp"
