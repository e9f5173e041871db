/* What the C programs that run kabi on a CUDA device share: the driver API opened at run time (as a C application
 * without the CUDA toolkit would open it: cuMemAlloc, copies, a synchronize), a check that prints its own message and
 * counts the failures, and bfloat16 as its 16 bits. Each program includes it once. C99. */
#ifndef KABI_CUDA_TEST_SUPPORT_H_
#define KABI_CUDA_TEST_SUPPORT_H_

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* What a program returns when there is no CUDA device (ctest's convention for a skipped test). */
#define SKIPPED 77

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int*, int);
typedef int (*cu_primary_retain_fn)(void**, int);
typedef int (*cu_ctx_set_current_fn)(void*);
typedef int (*cu_mem_alloc_fn)(uint64_t*, size_t);
typedef int (*cu_mem_free_fn)(uint64_t);
typedef int (*cu_copy_to_device_fn)(uint64_t, const void*, size_t);
typedef int (*cu_copy_to_host_fn)(void*, uint64_t, size_t);
typedef int (*cu_synchronize_fn)(void);

/* The driver calls the programs make, filled by open_driver. */
static struct {
  cu_mem_alloc_fn alloc;
  cu_mem_free_fn release;
  cu_copy_to_device_fn to_device;
  cu_copy_to_host_fn to_host;
  cu_synchronize_fn synchronize;
} cu;

static int failures = 0;
/* A failed check prints its location and the printf-style message after the condition, and counts. */
#define CHECK(condition, ...)                                \
  do {                                                       \
    if (!(condition)) {                                      \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      ++failures;                                            \
    }                                                        \
  } while (0)

/* dlsym's object pointer stored into a function pointer the way POSIX shows (ISO C has no conversion between the
 * two, and -pedantic refuses a cast). */
#define RESOLVE(library, target, symbol) (*(void**)(&(target)) = dlsym((library), (symbol)))

/* Opens libcuda, fills `cu` and makes device 0's primary context current; 0 where any of it fails (no driver, no
 * device). */
static inline int open_driver(void) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  cu_init_fn init;
  cu_device_get_fn device_get;
  cu_primary_retain_fn retain;
  cu_ctx_set_current_fn set_current;
  int device = 0;
  void* context = NULL;
  if (driver == NULL) return 0;
  RESOLVE(driver, init, "cuInit");
  RESOLVE(driver, device_get, "cuDeviceGet");
  RESOLVE(driver, retain, "cuDevicePrimaryCtxRetain");
  RESOLVE(driver, set_current, "cuCtxSetCurrent");
  RESOLVE(driver, cu.alloc, "cuMemAlloc_v2");
  RESOLVE(driver, cu.release, "cuMemFree_v2");
  RESOLVE(driver, cu.to_device, "cuMemcpyHtoD_v2");
  RESOLVE(driver, cu.to_host, "cuMemcpyDtoH_v2");
  RESOLVE(driver, cu.synchronize, "cuCtxSynchronize");
  return init != NULL && device_get != NULL && retain != NULL && set_current != NULL && cu.alloc != NULL &&
         cu.release != NULL && cu.to_device != NULL && cu.to_host != NULL && cu.synchronize != NULL &&
         init(0) == 0 && device_get(&device, 0) == 0 && retain(&context, device) == 0 && set_current(context) == 0;
}

/* bfloat16 as its 16 bits: round to nearest even from float, and back. */
static inline uint16_t to_bfloat16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static inline float from_bfloat16(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

#endif /* KABI_CUDA_TEST_SUPPORT_H_ */
