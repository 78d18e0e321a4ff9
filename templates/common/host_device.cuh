// FJ_HOST_DEVICE marks what both NVRTC and the host compiler read: the families' shared-memory
// layouts, which the host needs to launch and to prune tilings without a GPU.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FJ_HOST_DEVICE __host__ __device__
#else
#define FJ_HOST_DEVICE
#endif
