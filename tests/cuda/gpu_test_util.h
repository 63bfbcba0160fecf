// Shared helpers for kvdepot_gpu_tests.
#pragma once

#include <gtest/gtest.h>

#include "kvdepot/cuda/device.h"

// Skips the current test, printing the reason, when no usable CUDA device is present.
#define KVD_REQUIRE_GPU()                                                  \
  do {                                                                     \
    const ::kvdepot::Status kvd_gpu_ = ::kvdepot::cuda::GpuAvailable();    \
    if (!kvd_gpu_.ok()) GTEST_SKIP() << "no GPU: " << kvd_gpu_.message();  \
  } while (0)
