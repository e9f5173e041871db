/* The CUDA plugin's kernels called from C through the C ABI only: load libkabi_cuda.so (argv[1]), then launch every
 * matmul kernel it registered on device memory, on a problem off 16 bytes and on an aligned one, and check each result
 * against a double-precision reference, and
 * run kabi_call with the plugin's backend forced; and ask kabi_stream_execution_mode about a stream before, during and
 * after a capture. The driver API (cuMemAlloc, copies) is opened at run time, as a C
 * application without the CUDA toolkit would. Exits 77 (skipped) where there is no CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_support.h"
#include "kabi/kabi.h"

/* The aligned problem every kernel of the plugin takes, and one whose K and N are off 16 bytes, which only the
 * aligned-copies kernel and cuBLASLt's slow algorithms take. */
enum { M = 200, N = 136, K = 264, ODD_N = 135, ODD_K = 263 };

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

static uint16_t a[M * K], b[K * N], out[M * N];
static double reference[M * N];

/* The largest error relative to the largest reference magnitude, as the gate's "extreme" measure. */
static double extreme_error(int count) {
  double worst = 0.0, largest = 0.0;
  for (int i = 0; i < count; ++i) {
    const double difference = fabs((double)from_bfloat16(out[i]) - reference[i]);
    if (difference > worst || difference != difference) worst = difference != difference ? INFINITY : difference;
    if (fabs(reference[i]) > largest) largest = fabs(reference[i]);
  }
  return worst / largest;
}

/* Fresh random a [M, k] and b [k, n] on the device (dense), and their product's reference on the host. */
static void fill_problem(int n, int k, uint64_t a_device, uint64_t b_device) {
  for (int i = 0; i < M * k; ++i) a[i] = to_bfloat16((float)rand() / RAND_MAX * 2.0f - 1.0f);
  for (int i = 0; i < k * n; ++i) b[i] = to_bfloat16((float)rand() / RAND_MAX * 2.0f - 1.0f);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) sum += (double)from_bfloat16(a[i * k + p]) * from_bfloat16(b[p * n + j]);
      reference[i * n + j] = sum;
    }
  }
  CHECK(cu.to_device(a_device, a, sizeof(uint16_t) * M * k) == 0 &&
            cu.to_device(b_device, b, sizeof(uint16_t) * k * n) == 0,
        "cuMemcpyHtoD");
}

/* Launch every matmul kernel of the plugin on `args`, an [M, k] @ [k, n] problem filled by fill_problem; a kernel
 * may decline it, except `must_run` (NULL: none). Returns how many ran. */
static int launch_every_kernel(const kabi_args* args, int n, uint64_t out_device, const char* must_run) {
  int ran = 0, must_run_ran = 0;
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
    cu.to_device(out_device, out, sizeof(uint16_t) * M * n);
    const kabi_status status = kabi_launch(kernel, args);
    if (status == KABI_STATUS_CONSTRAINT_VIOLATED) {
      printf("%-56s N=%d declined: %s\n", info.name, n, kabi_last_error());
      continue;
    }
    CHECK(status == KABI_STATUS_OK, "%s: %s", info.name, kabi_last_error());
    CHECK(cu.synchronize() == 0 && cu.to_host(out, out_device, sizeof(uint16_t) * M * n) == 0, "%s: copy back",
          info.name);
    const double error = extreme_error(M * n);
    CHECK(error <= 4e-2, "%s: extreme error %g", info.name, error);
    printf("%-56s N=%d extreme error %.2e\n", info.name, n, error);
    ++ran;
    must_run_ran |= must_run != NULL && strcmp(info.name, must_run) == 0;
  }
  CHECK(must_run == NULL || must_run_ran, "%s did not run on N=%d", must_run, n);
  return ran;
}

/* kabi_stream_execution_mode on a stream of this program's own: eager, then graph while the stream is captured (in
 * the global mode torch uses), then eager again; the legacy stream is never captured. */
static void check_stream_execution_mode(void) {
  typedef int (*stream_create_fn)(void**, unsigned);
  typedef int (*begin_capture_fn)(void*, int);
  typedef int (*end_capture_fn)(void*, void**);
  typedef int (*graph_destroy_fn)(void*);
  typedef int (*stream_destroy_fn)(void*);
  stream_create_fn stream_create;
  begin_capture_fn begin_capture;
  end_capture_fn end_capture;
  graph_destroy_fn graph_destroy;
  stream_destroy_fn stream_destroy;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* stream = NULL;
  void* graph = NULL;
  const DLDevice device = {kDLCUDA, 0};
  int32_t mode = -1;
  CHECK(driver != NULL, "dlopen libcuda.so.1");
  if (driver == NULL) return;
  RESOLVE(driver, stream_create, "cuStreamCreate");
  RESOLVE(driver, begin_capture, "cuStreamBeginCapture_v2");
  RESOLVE(driver, end_capture, "cuStreamEndCapture");
  RESOLVE(driver, graph_destroy, "cuGraphDestroy");
  RESOLVE(driver, stream_destroy, "cuStreamDestroy_v2");
  CHECK(stream_create != NULL && begin_capture != NULL && end_capture != NULL && graph_destroy != NULL &&
            stream_destroy != NULL && stream_create(&stream, 1) == 0,
        "the driver's stream capture entry points");
  if (stream != NULL) {
    CHECK(kabi_stream_execution_mode(device, stream, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_EAGER,
          "a new stream runs eagerly: %s", kabi_last_error());
    CHECK(begin_capture(stream, 0) == 0, "cuStreamBeginCapture");
    CHECK(kabi_stream_execution_mode(device, stream, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_GRAPH,
          "a stream being captured runs in graph mode: %s", kabi_last_error());
    CHECK(end_capture(stream, &graph) == 0, "cuStreamEndCapture");
    CHECK(kabi_stream_execution_mode(device, stream, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_EAGER,
          "after the capture the stream runs eagerly again: %s", kabi_last_error());
    if (graph != NULL) graph_destroy(graph);
    stream_destroy(stream);
  }
  CHECK(kabi_stream_execution_mode(device, NULL, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_EAGER,
        "the legacy stream runs eagerly");
  dlclose(driver);
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

  srand(7);
  uint64_t a_device = 0, b_device = 0, out_device = 0;
  CHECK(cu.alloc(&a_device, sizeof a) == 0 && cu.alloc(&b_device, sizeof b) == 0 &&
            cu.alloc(&out_device, sizeof out) == 0,
        "cuMemAlloc");

  int64_t a_shape[2] = {M, ODD_K}, b_shape[2] = {ODD_K, ODD_N}, out_shape[2] = {M, ODD_N};
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
  fill_problem(ODD_N, ODD_K, a_device, b_device);
  int ran = launch_every_kernel(&args, ODD_N, out_device, "cuda.cublaslt.aligned_copies");

  a_shape[1] = b_shape[0] = K;
  b_shape[1] = out_shape[1] = N;
  fill_problem(N, K, a_device, b_device);
  ran += launch_every_kernel(&args, N, out_device, NULL);
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
  CHECK(extreme_error(M * N) <= 4e-2, "kabi_call: extreme error %g", extreme_error(M * N));

  cu.release(a_device);
  cu.release(b_device);
  cu.release(out_device);
  check_stream_execution_mode();
  printf("%s: %d kernels ran\n", failures == 0 ? "PASSED" : "FAILED", ran);
  return failures == 0 ? 0 : 1;
}
