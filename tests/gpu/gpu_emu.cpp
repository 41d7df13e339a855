/* A GPU emulator for tests: runs the real kernel source (mi_kernels.cu,
 * compiled here as C++ with mi_gpu_emu.h) behind the real host side of the
 * GPU plugins (gpu_platform.c, gpu_launch.c) by implementing the gpu_rt
 * table (gpu_rt.h) on the host: memory is malloc, copies are memcpy, a
 * "launch" runs every block of the grid, each GPU thread as a fiber
 * so that __syncthreads() and warp shuffles are real barriers.
 *
 * Built into test-only plugins (libmi-gpuemu32.so: NVIDIA tunables, warp
 * 32; libmi-gpuemu64.so: DCU tunables, wavefront 64) that ctest runs
 * through gpu_conformance: kernel indexing, tiling, split-K attention, the
 * embed error word, argument packing and launch geometry are all checked
 * against float64 on a machine without a GPU.
 *
 * Device memory is not host-accessible outside the emulator's own calls
 * (mprotect), so host code that dereferences a device pointer crashes.
 *
 * Environment: MI_GPU_EMU_CUS (default 8) — the compute-unit count the
 * device reports; small, so that decode attention takes the split-K path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MI_GPU_EMULATOR 1
#include "mi_kernels.cu"

extern "C" {
#include "gpu_rt.h"
}

mi_dim3 mi_emu_thread_idx, mi_emu_block_idx, mi_emu_block_dim, mi_emu_grid_dim;

/* ---------------- fibers ----------------
 * x86-64 only (the CMake rule checks): a fiber switch is six callee-saved
 * registers and a stack pointer, no system call (swapcontext's signal-mask
 * calls made the emulator ~30x slower). Fibers are made once and reused:
 * each loops "run the kernel body for the current block, then park". */

enum { ST_RUN, ST_BLOCK, ST_WARP, ST_DONE };
#define EMU_MAX_THREADS 1024
#define EMU_STACK (64 * 1024)

extern "C" void mi_emu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl mi_emu_switch\n"
        ".hidden mi_emu_switch\n"
        ".type mi_emu_switch,@function\n"
        "mi_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mi_emu_switch, .-mi_emu_switch\n");

static void *sched_sp, *fib_sp[EMU_MAX_THREADS];
static int fib_made;
static unsigned char *stacks;
static int state[EMU_MAX_THREADS];
static float xbuf[EMU_MAX_THREADS];
static int cur, nthreads;
static void (*cur_tramp)(void **);
static void **cur_args;
static unsigned char *dyn_smem;
static size_t dyn_smem_size;
static char emu_err[256];

static void wait_as(int st) {
  state[cur] = st;
  mi_emu_switch(&fib_sp[cur], sched_sp);
}

void mi_emu_syncthreads(void) { wait_as(ST_BLOCK); }

float mi_emu_shfl_xor(float v, int mask) {
  int me = cur, base = me / MI_WARP * MI_WARP;
  xbuf[me] = v;
  wait_as(ST_WARP); /* every lane has written */
  float r = xbuf[base + ((me - base) ^ mask)];
  wait_as(ST_WARP); /* every lane has read: the next shuffle may overwrite */
  return r;
}

void *mi_emu_dynamic_shared(void) { return dyn_smem; }

static __attribute__((noreturn)) void fiber_entry(void) {
  for (;;) {
    cur_tramp(cur_args); /* cur is this fiber's index whenever it runs */
    wait_as(ST_DONE);
  }
}

/* A fresh fiber's stack looks like mi_emu_switch's frame: six registers,
 * then fiber_entry as the return address (entered with rsp = 8 mod 16, as
 * after a call). */
static void make_fibers(void) {
  for (int t = 0; t < EMU_MAX_THREADS; t++) {
    uintptr_t top = ((uintptr_t)(stacks + (size_t)(t + 1) * EMU_STACK)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                      /* fiber_entry's own return address: never used */
    *--sp = (void *)fiber_entry;
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12 r13 r14 r15 */
    fib_sp[t] = sp;
  }
  fib_made = 1;
}

/* Runs one block; 0, or -1 on a deadlock (threads stuck at barriers that
 * can never all be reached). */
static int run_block(void) {
  for (int t = 0; t < nthreads; t++) state[t] = ST_RUN;
  for (;;) {
    int ran = 0;
    for (int t = 0; t < nthreads; t++) {
      if (state[t] != ST_RUN) continue;
      cur = t;
      mi_emu_thread_idx.x = (unsigned)t;
      mi_emu_thread_idx.y = mi_emu_thread_idx.z = 0;
      mi_emu_switch(&sched_sp, fib_sp[t]);
      ran = 1;
    }
    if (ran) continue;
    int live = 0, released = 0;
    /* warps whose live lanes all wait at a shuffle */
    for (int w = 0; w < nthreads; w += MI_WARP) {
      int all = 1, any = 0;
      for (int t = w; t < w + MI_WARP && t < nthreads; t++) {
        if (state[t] == ST_DONE) continue;
        any = 1;
        if (state[t] != ST_WARP) all = 0;
      }
      if (any && all) {
        for (int t = w; t < w + MI_WARP && t < nthreads; t++)
          if (state[t] == ST_WARP) state[t] = ST_RUN;
        released = 1;
      }
    }
    if (released) continue;
    int all_block = 1;
    for (int t = 0; t < nthreads; t++) {
      if (state[t] == ST_DONE) continue;
      live++;
      if (state[t] != ST_BLOCK) all_block = 0;
    }
    if (live == 0) return 0;
    if (!all_block) {
      snprintf(emu_err, sizeof emu_err,
               "deadlock in block (%u,%u): threads wait at different barriers", mi_emu_block_idx.x,
               mi_emu_block_idx.y);
      fib_made = 0; /* the stuck fibers are made afresh by the next launch */
      return -1;
    }
    for (int t = 0; t < nthreads; t++)
      if (state[t] == ST_BLOCK) state[t] = ST_RUN;
  }
}

/* ---------------- kernel trampolines ---------------- */

#define A(i, T) (*(T *)a[i])
#define GEMV(n) \
  static void t_##n(void **a) { n(A(0, float *), A(1, const float *), A(2, const void *), A(3, int64_t), A(4, int64_t), A(5, int64_t), A(6, int32_t)); }
#define MM(n) \
  static void t_##n(void **a) { n(A(0, float *), A(1, const float *), A(2, const void *), A(3, int64_t), A(4, int64_t), A(5, int64_t)); }
#define EMB(n) \
  static void t_##n(void **a) { n(A(0, float *), A(1, const void *), A(2, const int32_t *), A(3, int64_t), A(4, int64_t), A(5, int32_t *)); }
GEMV(mi_k_gemv_f32) GEMV(mi_k_gemv_f16) GEMV(mi_k_gemv_bf16)
GEMV(mi_k_gemv_q8_0) GEMV(mi_k_gemv_q4_0) GEMV(mi_k_gemv_q4_k) GEMV(mi_k_gemv_q6_k)
GEMV(mi_k_gemv_q5_k) GEMV(mi_k_gemv_q4_1) GEMV(mi_k_gemv_q5_0) GEMV(mi_k_gemv_q5_1) GEMV(mi_k_gemv_q2_k) GEMV(mi_k_gemv_q3_k)
MM(mi_k_mm_f32) MM(mi_k_mm_f16) MM(mi_k_mm_bf16)
MM(mi_k_mm_q8_0) MM(mi_k_mm_q4_0) MM(mi_k_mm_q4_k) MM(mi_k_mm_q6_k)
MM(mi_k_mm_q5_k) MM(mi_k_mm_q4_1) MM(mi_k_mm_q5_0) MM(mi_k_mm_q5_1) MM(mi_k_mm_q2_k) MM(mi_k_mm_q3_k)
EMB(mi_k_embed_f32) EMB(mi_k_embed_f16) EMB(mi_k_embed_bf16)
EMB(mi_k_embed_q8_0) EMB(mi_k_embed_q4_0) EMB(mi_k_embed_q4_k) EMB(mi_k_embed_q6_k)
EMB(mi_k_embed_q5_k) EMB(mi_k_embed_q4_1) EMB(mi_k_embed_q5_0) EMB(mi_k_embed_q5_1) EMB(mi_k_embed_q2_k) EMB(mi_k_embed_q3_k)
static void t_mi_k_rmsnorm(void **a) {
  mi_k_rmsnorm(A(0, float *), A(1, const float *), A(2, const float *), A(3, int64_t), A(4, float), A(5, float));
}
static void t_mi_k_rope(void **a) {
  mi_k_rope(A(0, float *), A(1, const int32_t *), A(2, int64_t), A(3, int64_t), A(4, int64_t), A(5, int64_t), A(6, float));
}
static void t_mi_k_attn(void **a) {
  mi_k_attn(A(0, float *), A(1, float *), A(2, const float *), A(3, const float *), A(4, const float *),
            A(5, int64_t), A(6, int64_t), A(7, int64_t), A(8, int64_t), A(9, int64_t), A(10, float),
            A(11, int32_t), A(12, int32_t), A(13, int32_t), A(14, int64_t));
}
static void t_mi_k_attn_combine(void **a) {
  mi_k_attn_combine(A(0, float *), A(1, const float *), A(2, int64_t), A(3, int64_t), A(4, int64_t), A(5, int32_t));
}
static void t_mi_k_silu_mul(void **a) { mi_k_silu_mul(A(0, float *), A(1, const float *), A(2, const float *), A(3, int64_t)); }
static void t_mi_k_add(void **a) { mi_k_add(A(0, float *), A(1, const float *), A(2, const float *), A(3, int64_t)); }
static void t_mi_k_scale(void **a) { mi_k_scale(A(0, float *), A(1, const float *), A(2, float), A(3, int64_t)); }
static void t_mi_k_argmax(void **a) { mi_k_argmax(A(0, int32_t *), A(1, const float *), A(2, int64_t)); }
/* ABI 1.4: the gated-DeltaNet hybrid's blocks */
static void t_mi_k_copy2d(void **a) {
  mi_k_copy2d(A(0, float *), A(1, int64_t), A(2, const float *), A(3, int64_t), A(4, int64_t), A(5, int64_t));
}
static void t_mi_k_rownorm(void **a) {
  mi_k_rownorm(A(0, float *), A(1, const float *), A(2, const float *), A(3, const float *), A(4, int64_t),
               A(5, float), A(6, int32_t));
}
static void t_mi_k_sigmoid_mul(void **a) {
  mi_k_sigmoid_mul(A(0, float *), A(1, const float *), A(2, const float *), A(3, int64_t));
}
static void t_mi_k_deltanet_gates(void **a) {
  mi_k_deltanet_gates(A(0, float *), A(1, float *), A(2, const float *), A(3, const float *), A(4, const float *),
                      A(5, const float *), A(6, int64_t), A(7, int64_t));
}
static void t_mi_k_conv1d(void **a) {
  mi_k_conv1d(A(0, float *), A(1, const float *), A(2, const float *), A(3, float *), A(4, int64_t), A(5, int64_t),
              A(6, int64_t), A(7, int32_t));
}
static void t_mi_k_gdr(void **a) {
  mi_k_gdr(A(0, float *), A(1, const float *), A(2, const float *), A(3, const float *), A(4, const float *),
           A(5, const float *), A(6, float *), A(7, int64_t), A(8, int64_t), A(9, int64_t), A(10, int64_t),
           A(11, int64_t));
}

struct tramp {
  const char *name;
  void (*fn)(void **);
};
static const tramp tramps[] = {
#define X(n) {#n, t_##n},
    MI_GPU_KERNEL_LIST(X)
#undef X
};

#ifdef MI_GPU_MUTANTS
/* MI_GPU_MUTANT=half_acc at load: matmul accumulates in half precision
 * (mi_kernels.cu, MI_MUTANT_ACC). */
int mi_gpu_mutant_half_acc = getenv("MI_GPU_MUTANT") && !strcmp(getenv("MI_GPU_MUTANT"), "half_acc");
#endif

/* ---------------- the gpu_rt table ---------------- */

static int e_device_count(gpu_rt *, int *n) { *n = 1; return 0; }
static int e_bind(gpu_rt *, int) { return 0; }
static int e_device_name(gpu_rt *, int, char *buf, size_t len) {
  snprintf(buf, len, "MetaInfer GPU emulator (warp %d)", MI_WARP);
  return 0;
}
static int e_total_mem(gpu_rt *, int, uint64_t *b) { *b = 0; return 0; }
static int e_cus(gpu_rt *, int, int *n) {
  const char *v = getenv("MI_GPU_EMU_CUS");
  *n = v ? atoi(v) : 8;
  return 0;
}
static int e_warp(gpu_rt *, int, int *n) { *n = MI_WARP; return 0; }
/* "Device" memory is mmapped and kept PROT_NONE except while the emulator
 * itself runs a kernel or a copy: host code that dereferences a device
 * pointer (a model plugin assuming zero-copy, say) crashes here as it would
 * on a GPU. */
struct dev_alloc {
  void *p;
  size_t len;
};
static dev_alloc *allocs;
static size_t n_allocs, cap_allocs;

static void device_access(int on) {
  for (size_t i = 0; i < n_allocs; i++)
    mprotect(allocs[i].p, allocs[i].len, on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

static int e_alloc(gpu_rt *rt, void **p, size_t n) {
  size_t len = (n + 4095) / 4096 * 4096;
  if (len == 0) len = 4096;
  if (n_allocs == cap_allocs) {
    size_t cap = cap_allocs ? 2 * cap_allocs : 64;
    dev_alloc *a = (dev_alloc *)realloc(allocs, cap * sizeof *a);
    if (!a) return gpu_rt_fail(rt, "emu alloc(%zu): out of memory", n);
    allocs = a;
    cap_allocs = cap;
  }
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return gpu_rt_fail(rt, "emu alloc(%zu): out of memory", n);
  memset(m, 0xa5, len); /* poison, so that "zeroed" has to be done by the platform code */
  mprotect(m, len, PROT_NONE);
  allocs[n_allocs++] = {m, len};
  *p = m;
  return 0;
}
static int e_free(gpu_rt *rt, void *p) {
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].p == p) {
      munmap(p, allocs[i].len);
      allocs[i] = allocs[--n_allocs];
      return 0;
    }
  return gpu_rt_fail(rt, "emu free: %p is not a device allocation", p);
}
static int e_memset(gpu_rt *, void *p, int v, size_t n) {
  device_access(1);
  memset(p, v, n);
  device_access(0);
  return 0;
}
static int e_memcpy(gpu_rt *, void *d, const void *s, size_t n, int, void *) {
  device_access(1);
  memmove(d, s, n);
  device_access(0);
  return 0;
}
static int e_stream_create(gpu_rt *, void **s) { *s = malloc(1); return 0; }
static int e_stream_destroy(gpu_rt *, void *s) { free(s); return 0; }
static int e_stream_sync(gpu_rt *, void *) { return 0; }
static int e_module_load(gpu_rt *rt, const void *image, void **mod) {
  if (!image || memcmp(image, "MI-GPU-EMU", 10) != 0) return gpu_rt_fail(rt, "emu: not an emulator image");
  *mod = (void *)tramps;
  return 0;
}
static int e_module_unload(gpu_rt *, void *) {
  /* the plugin (and these statics) may be dlclosed next */
  for (size_t i = 0; i < n_allocs; i++) munmap(allocs[i].p, allocs[i].len);
  free(allocs);
  allocs = NULL;
  n_allocs = cap_allocs = 0;
  free(stacks);
  stacks = NULL;
  fib_made = 0;
  free(dyn_smem);
  dyn_smem = NULL;
  dyn_smem_size = 0;
  return 0;
}
static int e_get_function(gpu_rt *rt, void *, const char *name, void **fn) {
  for (const tramp &t : tramps)
    if (strcmp(t.name, name) == 0) {
      *fn = (void *)&t;
      return 0;
    }
  return gpu_rt_fail(rt, "emu: no kernel %s", name);
}
static int e_launch(gpu_rt *rt, void *fn, const unsigned g[3], const unsigned b[3], unsigned smem,
                    void *, void **args, const size_t *, int) {
  const tramp *t = (const tramp *)fn;
  if (b[0] == 0 || b[0] > EMU_MAX_THREADS || b[1] != 1 || b[2] != 1 || g[2] != 1)
    return gpu_rt_fail(rt, "emu: %s: unsupported block %u,%u,%u", t->name, b[0], b[1], b[2]);
  if (smem > 64 * 1024) return gpu_rt_fail(rt, "emu: %s: %u bytes of shared memory", t->name, smem);
  if (!stacks && !(stacks = (unsigned char *)malloc((size_t)EMU_MAX_THREADS * EMU_STACK)))
    return gpu_rt_fail(rt, "emu: out of memory for fiber stacks");
  if (!fib_made) make_fibers();
  if (smem > dyn_smem_size) {
    free(dyn_smem);
    dyn_smem = (unsigned char *)malloc(smem);
    dyn_smem_size = smem;
  }
  nthreads = (int)b[0];
  cur_tramp = t->fn;
  cur_args = args;
  mi_emu_block_dim = {b[0], 1, 1};
  mi_emu_grid_dim = {g[0], g[1], 1};
  device_access(1);
  for (unsigned y = 0; y < g[1]; y++)
    for (unsigned x = 0; x < g[0]; x++) {
      mi_emu_block_idx = {x, y, 0};
      if (dyn_smem) memset(dyn_smem, 0x5a, dyn_smem_size); /* garbage, as on a GPU */
      if (run_block() != 0) {
        device_access(0);
        return gpu_rt_fail(rt, "emu: %s: %s", t->name, emu_err);
      }
    }
  device_access(0);
  return 0;
}

static gpu_rt RT;

extern "C" gpu_rt *gpu_rt_emu_open(const char *, char *, size_t) {
  RT.api = "EMU";
  snprintf(RT.lib, sizeof RT.lib, "(built-in emulator)");
  RT.device_count = e_device_count;
  RT.bind = e_bind;
  RT.device_name = e_device_name;
  RT.device_total_mem = e_total_mem;
  RT.device_cus = e_cus;
  RT.device_warp = e_warp;
  RT.mem_alloc = e_alloc;
  RT.mem_free = e_free;
  RT.memset_sync = e_memset;
  RT.memcpy_async = e_memcpy;
  RT.stream_create = e_stream_create;
  RT.stream_destroy = e_stream_destroy;
  RT.stream_sync = e_stream_sync;
  RT.module_load = e_module_load;
  RT.module_unload = e_module_unload;
  RT.get_function = e_get_function;
  RT.launch = e_launch;
  return &RT;
}

static const unsigned char emu_image[] = "MI-GPU-EMU image: kernels are compiled into this plugin";
extern "C" const unsigned char *mi_gpu_code(size_t *size) {
  *size = sizeof emu_image;
  return emu_image;
}
