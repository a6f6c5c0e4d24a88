/* A stand-in for libnvidia-ml.so.1 for the script lane's GPU energy test (test_script_lane.py):
 * the three NVML calls a script lane makes, for two GPUs whose energy counters advance at 250 W
 * (millijoules since the library loaded, as nvmlDeviceGetTotalEnergyConsumption counts them);
 * GPU 1 has no counter (NVML_ERROR_NOT_SUPPORTED), as GPUs before Volta. Built by the test with
 * the system's C compiler. */
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static double loaded;

int nvmlInit_v2(void) {
    loaded = seconds();
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
    if (index > 1) {
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    }
    *device = (void*)(unsigned long)(index + 1);
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
    if ((unsigned long)device != 1) {
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    }
    *millijoules = (unsigned long long)((seconds() - loaded) * 250.0 * 1000.0);
    return 0;
}
