/* Run-time ISA detection.
 *
 * A feature is usable only when the CPU has it (CPUID) AND the OS saves the
 * matching register state on context switches (XCR0, read with XGETBV). A
 * CPU can report AVX-512F while the OS (or a hypervisor) leaves the ZMM state
 * disabled; executing an AVX-512 instruction then faults, so we fall back.
 *   XCR0 bit 1 SSE, bit 2 AVX (YMM upper halves)        -> needed for AVX2
 *   XCR0 bit 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM          -> needed for AVX-512
 */
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(MI_CPU_X86)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
  unsigned int lo, hi;
  /* xgetbv with ecx = 0; encoded as bytes so no -mxsave is needed. */
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}
#endif

#define XCR0_AVX_STATE 0x6ull     /* SSE | AVX */
#define XCR0_AVX512_STATE 0xe6ull /* SSE | AVX | opmask | ZMM_Hi256 | Hi16_ZMM */

void cpu_isa_detect(cpu_isa_info *out, long long xcr0_override) {
  memset(out, 0, sizeof *out);
  out->available[CPU_ISA_GENERIC] = 1;
#if !defined(MI_CPU_X86)
  (void)xcr0_override;
  snprintf(out->vendor, sizeof out->vendor, "non-x86");
  for (int i = 1; i < CPU_ISA_COUNT; i++)
    snprintf(out->why_not[i], sizeof out->why_not[i], "not an x86-64 build");
#else
  unsigned int a = 0, b = 0, c = 0, d = 0;
  unsigned int max_leaf = __get_cpuid_max(0, NULL);
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    memcpy(out->vendor, &b, 4);
    memcpy(out->vendor + 4, &d, 4);
    memcpy(out->vendor + 8, &c, 4);
    out->vendor[12] = 0;
  }
  unsigned int l1c = 0, l7b = 0, l7c = 0, l7_1a = 0, l7_max_sub = 0;
  if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) l1c = c;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    l7b = b;
    l7c = c;
    l7_max_sub = a;
    if (l7_max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      l7_1a = a;
    }
  }
  int osxsave = (l1c >> 27) & 1;
  int avx = (l1c >> 28) & 1, fma = (l1c >> 12) & 1, f16c = (l1c >> 29) & 1;
  int avx2 = (l7b >> 5) & 1;
  int avx512f = (l7b >> 16) & 1, avx512bw = (l7b >> 30) & 1, avx512vl = (l7b >> 31) & 1;
  int avx512bf16 = (l7_1a >> 5) & 1;
  int avx512vnni = (l7c >> 11) & 1;
  unsigned long long xcr0 = 0;
  if (xcr0_override >= 0)
    xcr0 = (unsigned long long)xcr0_override;
  else if (osxsave)
    xcr0 = read_xcr0();
  int os_avx = osxsave && (xcr0 & XCR0_AVX_STATE) == XCR0_AVX_STATE;
  int os_avx512 = osxsave && (xcr0 & XCR0_AVX512_STATE) == XCR0_AVX512_STATE;

  /* avx2 */
  if (!(avx && avx2 && fma && f16c))
    snprintf(out->why_not[CPU_ISA_AVX2], 160, "CPU lacks %s", !avx2 ? "AVX2" : !fma ? "FMA" : !f16c ? "F16C" : "AVX");
  else if (!os_avx)
    snprintf(out->why_not[CPU_ISA_AVX2], 160, "OS does not enable AVX (YMM) state (XCR0=0x%llx)", xcr0);
  else
    out->available[CPU_ISA_AVX2] = 1;
  /* avx512 builds on avx2 (its kernels also use FMA/F16C forms) */
  if (!out->available[CPU_ISA_AVX2])
    snprintf(out->why_not[CPU_ISA_AVX512], 160, "needs avx2 first: %.120s", out->why_not[CPU_ISA_AVX2]);
  else if (!avx512f)
    snprintf(out->why_not[CPU_ISA_AVX512], 160, "CPU lacks AVX-512F");
  else if (!os_avx512)
    snprintf(out->why_not[CPU_ISA_AVX512], 160,
             "OS does not enable AVX-512 opmask/ZMM state (XCR0=0x%llx)", xcr0);
  else
    out->available[CPU_ISA_AVX512] = 1;
  /* not a variant of its own: the Q8_0 matmul's tiles within avx512 */
  out->avx512_vnni = out->available[CPU_ISA_AVX512] && avx512bw && avx512vl && avx512vnni;
  if (!out->available[CPU_ISA_AVX512])
    snprintf(out->why_not[CPU_ISA_AVX512BF16], 160, "needs avx512 first: %.120s",
             out->why_not[CPU_ISA_AVX512]);
  else if (!(avx512bw && avx512vl && avx512bf16))
    snprintf(out->why_not[CPU_ISA_AVX512BF16], 160, "CPU lacks %s",
             !avx512bw ? "AVX-512BW" : !avx512vl ? "AVX-512VL" : "AVX512_BF16");
  else
    out->available[CPU_ISA_AVX512BF16] = 1;
#endif
}

static const char *const isa_names[CPU_ISA_COUNT] = {"generic", "avx2", "avx512", "avx512bf16"};

const char *cpu_isa_name(cpu_isa isa) {
  return (unsigned)isa < CPU_ISA_COUNT ? isa_names[isa] : "?";
}

int cpu_isa_from_name(const char *name, cpu_isa *out) {
  for (int i = 0; i < CPU_ISA_COUNT; i++)
    if (strcmp(name, isa_names[i]) == 0) {
      *out = (cpu_isa)i;
      return 0;
    }
  return -1;
}

int cpu_isa_score(cpu_isa isa) {
  static const int score[CPU_ISA_COUNT] = {10, 40, 60, 70};
  return (unsigned)isa < CPU_ISA_COUNT ? score[isa] : 0;
}

const char *cpu_isa_describe(cpu_isa isa) {
  switch (isa) {
  case CPU_ISA_AVX2: return "x86-64 AVX2+FMA+F16C";
  case CPU_ISA_AVX512: return "x86-64 AVX-512";
  case CPU_ISA_AVX512BF16: return "x86-64 AVX-512 BF16";
  default: return "portable C";
  }
}

int cpu_isa_simd_width(cpu_isa isa) {
  switch (isa) {
  case CPU_ISA_AVX2: return 8;
  case CPU_ISA_AVX512:
  case CPU_ISA_AVX512BF16: return 16;
  default:
#if defined(MI_CPU_X86)
    return 4; /* SSE2 is the x86-64 baseline the generic code is compiled for */
#else
    return 1;
#endif
  }
}
