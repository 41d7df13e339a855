/* The CPU platform plugin: descriptor, probe/score, init/fini, options and
 * the mi_platform_iface table.
 *
 * Options (plugins.conf or the command line, read with host->opt_get):
 *   threads=N      worker count including the caller; 0 or absent = online CPUs
 *   isa=NAME       generic | avx2 | avx512 | avx512bf16 (or auto): force a
 *                  variant; one this machine/OS cannot run is refused
 *   matmul_act=M   auto | f32 | bf16: how prefill matmuls with bf16 weights
 *                  treat the activations. f32: exact everywhere (weights
 *                  widened, f32 FMA). auto (default): on the avx512bf16
 *                  variant, from CPU_BF16ACT_MIN_M rows the activations are
 *                  rounded to bf16 and VDPBF16PS does the work (the matmul
 *                  contract's mode "bf16_activations"); exact elsewhere and
 *                  always for decode (M = 1). bf16: as auto, but refused on a
 *                  variant without AVX512_BF16. The variant name then reads
 *                  "avx512bf16+bf16act", so callers see the mode.
 *                  Q8_0, Q4_0, Q4_K and Q6_K weights (cpu_matmul_q8_0.c,
 *                  cpu_quant.h): auto and bf16 quantize the activations to
 *                  8 bits per block of 32 (integer dot products, every
 *                  variant, decode too); f32 widens the weights instead
 *                  (each value rounded once, f32 dot products: slow).
 *
 * Environment:
 *   MI_CPU_ISA=NAME      the default for isa= (an isa= option wins); refused
 *                        exactly like isa=NAME
 *   MI_CPU_MATMUL_ACT=M  the default for matmul_act= (the option wins);
 *                        refused exactly like matmul_act=M
 *   MI_CPU_ISA_MAX=NAME  behave as a host whose best variant is NAME: the
 *                        variants above it count as unavailable (auto picks
 *                        at most NAME, isa= above it is refused). A host
 *                        already below NAME is unchanged. Lets a whole test
 *                        suite run as on an AVX2-only (or older) machine.
 *   spin_us=N      how long idle threads spin before sleeping (default 50;
 *                  0 = sleep at once, kinder to a shared machine)
 *   debug_xcr0=HEX test hook: pretend XGETBV(0) returned HEX, e.g. 0x7 for
 *                  an OS that saves YMM but not ZMM state
 *
 * Variants. One .so carries all of them; cpu_isa.c decides at run time which
 * ones this CPU and OS can run, and the best one is used unless isa= says
 * otherwise. "avx512bf16" runs the same kernels as "avx512" (bf16 weights
 * widened to f32 in registers, f32 FMA: exact with respect to the f32
 * activations) except, unless matmul_act=f32, the prefill matmul with bf16
 * weights: VDPBF16PS on activations rounded to bf16 (cpu_matmul_bf16.c), 2x
 * the multiply-adds per instruction, within the looser bound the matmul
 * contract states for that mode.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "cpu_matmul_bf16.h"
#include "cpu_q8_0.h"

#define CPU_PLUGIN_VERSION "0.1.0"
#define CPU_MAX_THREADS 1024

int cpu_fail(cpu_ctx *c, const char *fmt, ...) {
  if (!c) return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(c->err, sizeof c->err, "cpu: ");
  vsnprintf(c->err + n, sizeof c->err - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------------- options ---------------- */

static const char *opt(const mi_host_api *host, const mi_options *opts, const char *key) {
  if (!opts) return NULL;
  if (host && host->opt_get) return host->opt_get(opts, key);
  /* No host table (a bare test harness): the last occurrence wins, as the
   * command line is appended after plugins.conf. */
  const char *v = NULL;
  for (size_t i = 0; i < opts->count; i++)
    if (opts->items[i].key && strcmp(opts->items[i].key, key) == 0) v = opts->items[i].value;
  return v;
}

typedef struct cpu_config {
  cpu_isa isa;
  const char *forced_by; /* "isa" or "MI_CPU_ISA" when a variant was asked for, else NULL */
  int nthreads;
  int spin_us;
  int bf16act; /* 1: prefill bf16-weight matmuls round x to bf16 (matmul_act) */
  int act_exact; /* 1: matmul_act=f32: no activation rounding anywhere (block types included) */
  cpu_isa_info info;
} cpu_config;

/* Reads and checks the options. Returns 0, or -1 with one line in err. */
static int read_config(const mi_host_api *host, const mi_options *opts, cpu_config *cfg, char *err,
                       size_t err_len) {
  memset(cfg, 0, sizeof *cfg);
  long long xcr0 = -1;
  const char *v = opt(host, opts, "debug_xcr0");
  if (v && *v) {
    char *end;
    errno = 0;
    unsigned long long u = strtoull(v, &end, 0);
    if (errno || *end || u > (unsigned long long)0x7fffffffffffffffll) {
      snprintf(err, err_len, "cpu: option debug_xcr0=%s is not a number", v);
      return -1;
    }
    xcr0 = (long long)u;
  }
  cpu_isa_detect(&cfg->info, xcr0);

  /* The cap hides only variants the host could run: a real reason (CPU,
   * OS state) stays the reason given for the others. */
  v = getenv("MI_CPU_ISA_MAX");
  if (v && *v && strcmp(v, "auto") != 0) {
    cpu_isa cap;
    if (cpu_isa_from_name(v, &cap) != 0) {
      snprintf(err, err_len, "cpu: MI_CPU_ISA_MAX=%s is unknown (generic, avx2, avx512, avx512bf16, auto)",
               v);
      return -1;
    }
    for (int i = (int)cap + 1; i < CPU_ISA_COUNT; i++)
      if (cfg->info.available[i]) {
        cfg->info.available[i] = 0;
        snprintf(cfg->info.why_not[i], sizeof cfg->info.why_not[i],
                 "hidden by MI_CPU_ISA_MAX=%.32s", v);
      }
  }

  int best = CPU_ISA_GENERIC;
  for (int i = 0; i < CPU_ISA_COUNT; i++)
    if (cfg->info.available[i]) best = i;
  cfg->isa = (cpu_isa)best;
  const char *src = "isa", *eq = "option isa";
  v = opt(host, opts, "isa");
  if (!v || !*v) {
    src = eq = "MI_CPU_ISA";
    v = getenv("MI_CPU_ISA");
  }
  if (v && *v && strcmp(v, "auto") != 0) {
    cpu_isa want;
    if (cpu_isa_from_name(v, &want) != 0) {
      snprintf(err, err_len, "cpu: %s=%s is unknown (generic, avx2, avx512, avx512bf16, auto)", eq,
               v);
      return -1;
    }
    if (!cfg->info.available[want]) {
      snprintf(err, err_len, "cpu: %s=%s was requested but this machine cannot run it: %s", src, v,
               cfg->info.why_not[want]);
      return -1;
    }
    cfg->isa = want;
    cfg->forced_by = src;
  }

  /* matmul_act: read after the variant, which decides what it can do */
  src = "option matmul_act";
  v = opt(host, opts, "matmul_act");
  if (!v || !*v) {
    src = "MI_CPU_MATMUL_ACT";
    v = getenv("MI_CPU_MATMUL_ACT");
  }
  int act = 0; /* 0 auto, 1 f32, 2 bf16 */
  if (v && *v) {
    if (strcmp(v, "auto") == 0) act = 0;
    else if (strcmp(v, "f32") == 0) act = 1;
    else if (strcmp(v, "bf16") == 0) act = 2;
    else {
      snprintf(err, err_len, "cpu: %s=%s is unknown (auto, f32, bf16)", src, v);
      return -1;
    }
  }
  if (act == 2 && cfg->isa != CPU_ISA_AVX512BF16) {
    if (!cfg->info.available[CPU_ISA_AVX512BF16])
      snprintf(err, err_len, "cpu: %s=bf16 was requested but this machine cannot run it: %s", src,
               cfg->info.why_not[CPU_ISA_AVX512BF16]);
    else
      snprintf(err, err_len, "cpu: %s=bf16 was requested but the variant in use, %s (%s=%s), has no VDPBF16PS",
               src, cpu_isa_name(cfg->isa), cfg->forced_by ? cfg->forced_by : "isa",
               cpu_isa_name(cfg->isa));
    return -1;
  }
  cfg->bf16act = act != 1 && cfg->isa == CPU_ISA_AVX512BF16;
  cfg->act_exact = act == 1;

  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cfg->nthreads = online > 0 ? (int)(online < CPU_MAX_THREADS ? online : CPU_MAX_THREADS) : 1;
  v = opt(host, opts, "threads");
  if (v && *v) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < 0 || n > CPU_MAX_THREADS) {
      snprintf(err, err_len, "cpu: option threads=%s must be an integer in [0, %d] (0 = all CPUs)",
               v, CPU_MAX_THREADS);
      return -1;
    }
    if (n > 0) cfg->nthreads = (int)n;
  }
  /* Between kernels of one decode step the caller works for microseconds;
   * 50 us of spinning catches the next kernel without a futex wake-up and
   * costs little when the engine is idle. */
  cfg->spin_us = 50;
  v = opt(host, opts, "spin_us");
  if (v && *v) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < 0 || n > 100000) {
      snprintf(err, err_len, "cpu: option spin_us=%s must be an integer in [0, 100000]", v);
      return -1;
    }
    cfg->spin_us = (int)n;
  }
  return 0;
}

/* ---------------- descriptor entry points ---------------- */

static int cpu_probe(const mi_host_api *host, const mi_options *opts, char *why, size_t why_len) {
  cpu_config cfg;
  char err[256];
  if (read_config(host, opts, &cfg, err, sizeof err) != 0) {
    if (why && why_len) snprintf(why, why_len, "%s", err);
    return 0;
  }
  if (why && why_len) {
    const char *state = cfg.isa >= CPU_ISA_AVX512 ? ", OS enables ZMM state"
                        : cfg.isa == CPU_ISA_AVX2 ? ", OS enables YMM state"
                                                  : "";
    if (cfg.forced_by)
      snprintf(why, why_len, "%s%s (forced by %s=%s)", cpu_isa_describe(cfg.isa), state,
               cfg.forced_by, cpu_isa_name(cfg.isa));
    else if (cfg.isa < CPU_ISA_AVX512BF16)
      snprintf(why, why_len, "%s%s; %s unavailable: %s", cpu_isa_describe(cfg.isa), state,
               cpu_isa_name((cpu_isa)(cfg.isa + 1)), cfg.info.why_not[cfg.isa + 1]);
    else
      snprintf(why, why_len, "%s%s", cpu_isa_describe(cfg.isa), state);
  }
  return cpu_isa_score(cfg.isa);
}

static const char *cpu_variant(void *ctx);

static const cpu_kernel_set *kernels_for(cpu_isa isa) {
#if defined(MI_CPU_X86)
  if (isa >= CPU_ISA_AVX512) return &cpu_kernels_avx512;
  if (isa == CPU_ISA_AVX2) return &cpu_kernels_avx2;
#else
  (void)isa;
#endif
  return &cpu_kernels_generic;
}

static int cpu_init(const mi_host_api *host, const mi_options *opts, void **ctx, char *err,
                    size_t err_len) {
  char dummy[8];
  if (!err || !err_len) {
    err = dummy;
    err_len = sizeof dummy;
  }
  if (!ctx) {
    snprintf(err, err_len, "cpu: init called with a NULL ctx pointer");
    return -1;
  }
  *ctx = NULL;
  cpu_config cfg;
  if (read_config(host, opts, &cfg, err, err_len) != 0) return -1;
  cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, err_len, "cpu: out of memory creating the context");
    return -1;
  }
  c->host = host;
  c->isa = cfg.isa;
  c->k = kernels_for(cfg.isa);
#if defined(MI_CPU_X86)
  if (cfg.bf16act) c->k = &cpu_kernels_avx512bf16act;
#endif
  c->q8ops = cpu_q8_ops_for(cfg.isa, cfg.info.avx512_vnni);
  c->matmul_exact = cfg.act_exact;
  c->nthreads = cfg.nthreads;
  if (cpu_pool_create(&c->pool, cfg.nthreads, cfg.spin_us, err, err_len) != 0) {
    free(c);
    return -1;
  }
  if (cpu_comm_init(c, err, err_len) != 0) {
    cpu_pool_destroy(c->pool);
    free(c);
    return -1;
  }
  if (cpu_rope_cache_init(c) != 0 || cpu_q8_scratch_init(c) != 0 || cpu_profile_init(c) != 0) {
    snprintf(err, err_len, "cpu: out of memory creating the context");
    cpu_q8_scratch_free(c);
    cpu_rope_cache_free(c);
    cpu_comm_fini(c);
    cpu_pool_destroy(c->pool);
    free(c);
    return -1;
  }
  snprintf(c->device_name, sizeof c->device_name, "%s (%d thread%s)", cpu_isa_describe(c->isa),
           c->nthreads, c->nthreads == 1 ? "" : "s");
  if (host && host->log)
    host->log(MI_LOG_INFO, CPU_PLUGIN_NAME,
              "variant %s, %d thread%s, block-type matmul: %s", cpu_variant(c),
              c->nthreads, c->nthreads == 1 ? "" : "s",
              c->matmul_exact ? "exact (matmul_act=f32)" : c->q8ops->name);
  *ctx = c;
  return 0;
}

static void cpu_fini(void *ctx) {
  cpu_ctx *c = ctx;
  if (!c) return;
  cpu_profile_report(c);
  cpu_q8_scratch_free(c);
  cpu_rope_cache_free(c);
  cpu_comm_fini(c);
  cpu_pool_destroy(c->pool);
  free(c);
}

/* ---------------- identity ---------------- */

static const char *cpu_variant(void *ctx) {
  cpu_ctx *c = ctx;
  /* the kernel set's name: the ISA, plus "+bf16act" when prefill rounds
   * activations to bf16 (callers such as mi-verify pick the tolerance by it) */
  if (!c) return "?";
#if defined(MI_CPU_X86)
  if (c->k == &cpu_kernels_avx512bf16act) return c->k->name;
#endif
  return cpu_isa_name(c->isa);
}

static int cpu_device_count(void *ctx) {
  (void)ctx;
  return 1;
}

static int cpu_device_info(void *ctx, int device, mi_device_info *out) {
  cpu_ctx *c = ctx;
  if (!out) return cpu_fail(c, "device_info: NULL out pointer");
  if (device != 0) return cpu_fail(c, "device_info: no device %d (the cpu platform has device 0)", device);
  mi_device_info d;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "%s", c->device_name);
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  d.total_memory = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
  d.host_memory = 1;
  d.compute_units = c->nthreads;
  d.simd_width = cpu_isa_simd_width(c->isa);
  /* A caller built against an older SDK announces a smaller struct in
   * out->struct_size (0: not set, take ours); never write past it. */
  size_t n = out->struct_size >= sizeof(uint32_t) && out->struct_size < sizeof d ? out->struct_size
                                                                                : sizeof d;
  d.struct_size = (uint32_t)n;
  memcpy(out, &d, n);
  return 0;
}

static const char *cpu_last_error(void *ctx) {
  cpu_ctx *c = ctx;
  return c ? c->err : "cpu: no context";
}

/* ---------------- tables ---------------- */

static const mi_platform_iface cpu_iface = {
    .struct_size = sizeof(mi_platform_iface),
    .variant = cpu_variant,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .last_error = cpu_last_error,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_wrap_host = cpu_buffer_wrap_host,
    .buffer_free = cpu_buffer_free,
    .buffer_ptr = cpu_buffer_ptr,
    .memcpy_h2d = cpu_memcpy_h2d,
    .memcpy_d2h = cpu_memcpy_d2h,
    .memcpy_d2d = cpu_memcpy_d2d,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .scale = cpu_scale,
    .embed = cpu_embed,
    .argmax = cpu_argmax,
    .comm_info = cpu_comm_info,
    .convert = cpu_convert,
    .copy2d = cpu_copy2d,
    .l2norm = cpu_l2norm,
    .sigmoid_mul = cpu_sigmoid_mul,
    .conv1d_causal = cpu_conv1d_causal,
    .deltanet_gates = cpu_deltanet_gates,
    .gated_delta_rule = cpu_gated_delta_rule,
    .rmsnorm_gated = cpu_rmsnorm_gated,
    .run_host = cpu_run_host,
#if defined(MI_CPU_MPI)
    .allreduce_sum_f32 = cpu_allreduce_sum_f32,
    .broadcast = cpu_broadcast,
#endif
};

static const void *cpu_get_iface(void *ctx) {
  /* MI_CPU_PROFILE=1: the timed copy (cpu_profile.c); else this table */
  return cpu_profile_iface(ctx, &cpu_iface);
}

static const mi_plugin_desc cpu_desc = {
    .abi_major = MI_ABI_MAJOR,
    .abi_minor = MI_ABI_MINOR,
    .struct_size = sizeof(mi_plugin_desc),
    .kind = MI_PLUGIN_PLATFORM,
    .name = CPU_PLUGIN_NAME,
    .version = CPU_PLUGIN_VERSION,
    .description = "host CPU: x86-64 generic/AVX2/AVX-512/AVX-512 BF16 kernels chosen at run time, "
                   "persistent thread pool, zero-copy host buffers",
    .probe = cpu_probe,
    .init = cpu_init,
    .fini = cpu_fini,
    .get_iface = cpu_get_iface,
};

MI_PLUGIN_DEFINE(cpu_desc)
