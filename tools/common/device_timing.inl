#include <algorithm>

namespace flashjit::tools {

template <class F>
Result<double> time_ms(const DriverLibrary& drv, F&& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) FJ_TRY(fn(i));
  CUevent start = nullptr, stop = nullptr;
  FJ_CU(drv, cuEventCreate(&start, CU_EVENT_DEFAULT));
  FJ_CU(drv, cuEventCreate(&stop, CU_EVENT_DEFAULT));
  std::vector<float> times;
  Status failed;
  for (int i = 0; i < reps && failed.ok(); ++i) {
    drv.cuEventRecord(start, nullptr);
    failed = fn(warmup + i);
    drv.cuEventRecord(stop, nullptr);
    if (CUresult r = drv.cuEventSynchronize(stop); r != CUDA_SUCCESS && failed.ok()) failed = drv.error(r, "cuEventSynchronize");
    float ms = 0;
    drv.cuEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  drv.cuEventDestroy(start);
  drv.cuEventDestroy(stop);
  if (!failed.ok()) return std::move(failed).error();
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return double(times[times.size() / 2]);
}

}  // namespace flashjit::tools
