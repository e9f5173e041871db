// Probing the host CPU: vendor, brand, ISA features, x86-64 micro-architecture level, cores and memory.
#include <unistd.h>

#include <cstring>
#include <string>

#include "device.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#define KABI_CPU_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#define KABI_CPU_AARCH64 1
#endif

namespace kabi::core {
namespace {

template <size_t N>
void copy_text(char (&destination)[N], const std::string& text) {
  const size_t length = text.size() < N - 1 ? text.size() : N - 1;
  std::memcpy(destination, text.data(), length);
  destination[length] = '\0';
}

std::string trimmed(const char* text) {
  std::string value(text);
  const size_t begin = value.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  return value.substr(begin, value.find_last_not_of(' ') - begin + 1);
}

#if KABI_CPU_X86

struct CpuidRegisters {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegisters cpuid(unsigned leaf, unsigned subleaf = 0) {
  CpuidRegisters r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool bit(unsigned value, int index) {
  return (value >> index) & 1u;
}

uint64_t read_xcr0() {
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

// Linux hands out the AMX tile-data state only to processes that ask (arch_prctl ARCH_REQ_XCOMP_PERM); until
// then AMX instructions fault, so AMX counts as available only once the request succeeded.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchRequestXcompPermission = 0x1023;
  constexpr int kXfeatureTileData = 18;
  return syscall(SYS_arch_prctl, kArchRequestXcompPermission, kXfeatureTileData) == 0;
#else
  return false;
#endif
}

void probe_x86(kabi_device_info& info) {
  const CpuidRegisters vendor = cpuid(0);
  const unsigned max_leaf = vendor.eax;
  char vendor_text[13] = {};
  std::memcpy(vendor_text, &vendor.ebx, 4);
  std::memcpy(vendor_text + 4, &vendor.edx, 4);
  std::memcpy(vendor_text + 8, &vendor.ecx, 4);
  copy_text(info.vendor, vendor_text);

  const CpuidRegisters extended = cpuid(0x80000000u);
  if (extended.eax >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const CpuidRegisters r = cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    copy_text(info.name, trimmed(brand));
  } else {
    copy_text(info.name, vendor_text);
  }

  const CpuidRegisters leaf1 = cpuid(1);
  const CpuidRegisters leaf7 = max_leaf >= 7 ? cpuid(7, 0) : CpuidRegisters{};
  const CpuidRegisters leaf7_1 = max_leaf >= 7 ? cpuid(7, 1) : CpuidRegisters{};
  const CpuidRegisters ext1 = extended.eax >= 0x80000001u ? cpuid(0x80000001u) : CpuidRegisters{};

  // The OS must save the wider registers on context switches before code may use them.
  const bool os_saves_state = bit(leaf1.ecx, 27);
  const uint64_t xcr0 = os_saves_state ? read_xcr0() : 0;
  const bool ymm_enabled = (xcr0 & 0x6) == 0x6;
  const bool zmm_enabled = ymm_enabled && (xcr0 & 0xE0) == 0xE0;
  const bool tiles_enabled = (xcr0 & 0x60000) == 0x60000;

  uint64_t features = 0;
  auto set = [&](bool present, uint64_t feature) {
    if (present) features |= feature;
  };
  set(bit(leaf1.ecx, 20), KABI_FEATURE_SSE4_2);
  set(bit(leaf1.ecx, 28) && ymm_enabled, KABI_FEATURE_AVX);
  set(bit(leaf7.ebx, 5) && ymm_enabled, KABI_FEATURE_AVX2);
  set(bit(leaf1.ecx, 12) && ymm_enabled, KABI_FEATURE_FMA);
  set(bit(leaf7.ebx, 16) && zmm_enabled, KABI_FEATURE_AVX512F);
  set(bit(leaf7.ebx, 30) && zmm_enabled, KABI_FEATURE_AVX512BW);
  set(bit(leaf7.ecx, 11) && zmm_enabled, KABI_FEATURE_AVX512_VNNI);
  set(bit(leaf7_1.eax, 5) && zmm_enabled, KABI_FEATURE_AVX512_BF16);
  set(bit(leaf7.edx, 23) && zmm_enabled, KABI_FEATURE_AVX512_FP16);
  const bool amx_usable = bit(leaf7.edx, 24) && tiles_enabled && request_amx_permission();
  set(amx_usable, KABI_FEATURE_AMX_TILE);
  set(amx_usable && bit(leaf7.edx, 22), KABI_FEATURE_AMX_BF16);
  set(amx_usable && bit(leaf7.edx, 25), KABI_FEATURE_AMX_INT8);
  info.features = features;

  // x86-64 micro-architecture levels as the psABI defines them.
  const bool level2 = bit(leaf1.ecx, 13) /* cx16 */ && bit(ext1.ecx, 0) /* lahf */ && bit(leaf1.ecx, 23) /* popcnt */ &&
                      bit(leaf1.ecx, 0) /* sse3 */ && bit(leaf1.ecx, 19) /* sse4.1 */ && bit(leaf1.ecx, 20) &&
                      bit(leaf1.ecx, 9) /* ssse3 */;
  const bool level3 = level2 && (features & KABI_FEATURE_AVX) && (features & KABI_FEATURE_AVX2) &&
                      (features & KABI_FEATURE_FMA) && bit(leaf7.ebx, 3) /* bmi1 */ && bit(leaf7.ebx, 8) /* bmi2 */ &&
                      bit(leaf1.ecx, 29) /* f16c */ && bit(ext1.ecx, 5) /* lzcnt */ && bit(leaf1.ecx, 22) /* movbe */;
  const bool level4 = level3 && (features & KABI_FEATURE_AVX512F) && (features & KABI_FEATURE_AVX512BW) &&
                      bit(leaf7.ebx, 28) /* cd */ && bit(leaf7.ebx, 17) /* dq */ && bit(leaf7.ebx, 31) /* vl */;
  info.arch = level4 ? 4 : level3 ? 3 : level2 ? 2 : 1;
}

#elif KABI_CPU_AARCH64

void probe_aarch64(kabi_device_info& info) {
  const unsigned long hwcap = getauxval(AT_HWCAP);
  if (hwcap & HWCAP_ASIMD) info.features |= KABI_FEATURE_NEON;
#ifdef HWCAP_SVE
  if (hwcap & HWCAP_SVE) info.features |= KABI_FEATURE_SVE;
#endif
  copy_text(info.vendor, "arm");
  copy_text(info.name, "aarch64");
}

#endif

kabi_device_info probe_cpu() {
  kabi_device_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.device_type = kDLCPU;
  info.device_index = 0;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  info.compute_units = cores > 0 ? static_cast<int32_t>(cores) : 1;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0)
    info.total_memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
#if KABI_CPU_X86
  probe_x86(info);
#elif KABI_CPU_AARCH64
  probe_aarch64(info);
#else
  copy_text(info.vendor, "unknown");
  copy_text(info.name, "unknown CPU");
#endif
  return info;
}

}  // namespace

const kabi_device_info& cpu_device_info() {
  static const kabi_device_info info = probe_cpu();
  return info;
}

}  // namespace kabi::core
