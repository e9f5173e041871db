/* The CUDA plugin's kernels called from C through the C ABI only: load libkabi_cuda.so (argv[1]), then launch every
 * matmul kernel it registered on device memory and check each result against a double-precision reference, and
 * run kabi_call with the plugin's backend forced. The driver API (cuMemAlloc, copies) is opened at run time, as a C
 * application without the CUDA toolkit would. Exits 77 (skipped) where there is no CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_support.h"
#include "kabi/kabi.h"

enum { M = 200, N = 136, K = 264 };

static DLTensor matrix(uint64_t data, int64_t* shape) {
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = (void*)(uintptr_t)data;
  tensor.device.device_type = kDLCUDA;
  tensor.ndim = 2;
  tensor.dtype.code = kDLBfloat;
  tensor.dtype.bits = 16;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  return tensor;
}

/* The largest error relative to the largest reference magnitude, as the gate's "extreme" measure. */
static double extreme_error(const uint16_t* out, const double* reference) {
  double worst = 0.0, largest = 0.0;
  for (int i = 0; i < M * N; ++i) {
    const double difference = fabs((double)from_bfloat16(out[i]) - reference[i]);
    if (difference > worst || difference != difference) worst = difference != difference ? INFINITY : difference;
    if (fabs(reference[i]) > largest) largest = fabs(reference[i]);
  }
  return worst / largest;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/libkabi_cuda.so\n", argv[0]);
    return 2;
  }
  if (kabi_plugin_load(argv[1]) != KABI_STATUS_OK) {
    fprintf(stderr, "FAILED: kabi_plugin_load(%s): %s\n", argv[1], kabi_last_error());
    return 1;
  }
  int32_t devices = 0;
  if (kabi_device_count(kDLCUDA, &devices) != KABI_STATUS_OK || devices == 0 || !open_driver()) {
    /* Without a device the plugin loads and registers nothing. */
    kabi_plugin_record record;
    memset(&record, 0, sizeof record);
    record.struct_size = sizeof record;
    const int loaded = kabi_plugin_at(kabi_plugin_count() - 1, &record) == KABI_STATUS_OK &&
                       record.state == KABI_PLUGIN_LOADED && strcmp(record.name, "kabi-cuda") == 0;
    if (devices == 0 && !(loaded && record.num_kernels == 0)) {
      fprintf(stderr, "FAILED: without a CUDA device the plugin should load and register nothing\n");
      return 1;
    }
    printf("no CUDA device: the plugin loaded and registered nothing; the rest is skipped\n");
    return SKIPPED;
  }

  static uint16_t a[M * K], b[K * N], out[M * N];
  static double reference[M * N];
  srand(7);
  for (int i = 0; i < M * K; ++i) a[i] = to_bfloat16((float)rand() / RAND_MAX * 2.0f - 1.0f);
  for (int i = 0; i < K * N; ++i) b[i] = to_bfloat16((float)rand() / RAND_MAX * 2.0f - 1.0f);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int p = 0; p < K; ++p) sum += (double)from_bfloat16(a[i * K + p]) * from_bfloat16(b[p * N + j]);
      reference[i * N + j] = sum;
    }
  }
  uint64_t a_device = 0, b_device = 0, out_device = 0;
  CHECK(cu.alloc(&a_device, sizeof a) == 0 && cu.alloc(&b_device, sizeof b) == 0 &&
            cu.alloc(&out_device, sizeof out) == 0,
        "cuMemAlloc");
  CHECK(cu.to_device(a_device, a, sizeof a) == 0 && cu.to_device(b_device, b, sizeof b) == 0, "cuMemcpyHtoD");

  int64_t a_shape[2] = {M, K}, b_shape[2] = {K, N}, out_shape[2] = {M, N};
  DLTensor inputs[2];
  inputs[0] = matrix(a_device, a_shape);
  inputs[1] = matrix(b_device, b_shape);
  DLTensor output = matrix(out_device, out_shape);
  kabi_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 2;
  args.outputs = &output;
  args.num_outputs = 1;

  int ran = 0;
  const int32_t count = kabi_kernel_count("matmul");
  for (int32_t i = 0; i < count; ++i) {
    kabi_kernel kernel = NULL;
    kabi_kernel_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (kabi_kernel_at("matmul", i, &kernel) != KABI_STATUS_OK ||
        kabi_kernel_info_get(kernel, &info) != KABI_STATUS_OK || strcmp(info.plugin, "kabi-cuda") != 0) {
      continue;
    }
    memset(out, 0xFF, sizeof out); /* NaN patterns: a kernel that writes nothing fails */
    cu.to_device(out_device, out, sizeof out);
    const kabi_status status = kabi_launch(kernel, &args);
    if (status == KABI_STATUS_CONSTRAINT_VIOLATED) {
      printf("%-56s declined: %s\n", info.name, kabi_last_error());
      continue;
    }
    CHECK(status == KABI_STATUS_OK, "%s: %s", info.name, kabi_last_error());
    CHECK(cu.synchronize() == 0 && cu.to_host(out, out_device, sizeof out) == 0, "%s: copy back", info.name);
    const double error = extreme_error(out, reference);
    CHECK(error <= 4e-2, "%s: extreme error %g", info.name, error);
    printf("%-56s extreme error %.2e\n", info.name, error);
    ++ran;
  }
  CHECK(ran > 0, "no kabi-cuda matmul kernel ran");

  /* Selection from C with the plugin's backend forced (C callers do not tune: allow an unverified pick). */
  kabi_op matmul = NULL;
  CHECK(kabi_op_find("matmul", &matmul) == KABI_STATUS_OK, "kabi_op_find");
  kabi_select_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = "cuda";
  options.use_tuning_cache = 1;
  options.allow_unverified = 1;
  memset(out, 0xFF, sizeof out);
  cu.to_device(out_device, out, sizeof out);
  CHECK(kabi_call(matmul, &args, &options) == KABI_STATUS_OK, "kabi_call: %s", kabi_last_error());
  CHECK(cu.synchronize() == 0 && cu.to_host(out, out_device, sizeof out) == 0, "kabi_call: copy back");
  CHECK(extreme_error(out, reference) <= 4e-2, "kabi_call: extreme error %g", extreme_error(out, reference));

  cu.release(a_device);
  cu.release(b_device);
  cu.release(out_device);
  printf("%s: %d kernels ran\n", failures == 0 ? "PASSED" : "FAILED", ran);
  return failures == 0 ? 0 : 1;
}
