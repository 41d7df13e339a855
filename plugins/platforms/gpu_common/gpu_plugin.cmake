# GPU platform plugins (k100, z200: HIP; nvidia: CUDA) — build rules.
#
# Each plugin directory holds a platform.json (api, offload arch, wavefront,
# tile sizes, score) and calls mi_gpu_plugin(<name>). The plugin .so is plain
# C compiled by the host compiler (gpu_common/*.c) and never links a GPU
# runtime (it dlopens it: see gpu_rt.h). Its device code is one code object
# compiled from gpu_common/mi_kernels.cu by hipcc (--genco) or nvcc
# (-fatbin) and embedded with .incbin. Without a device compiler that knows
# the target, the plugin is still built, without device code, and its probe
# says why (score 0).
#
# Cache variables:
#   MI_GPU_PLUGINS      build the GPU plugins at all (default ON)
#   MI_HIPCC            hipcc (found on PATH, or ROCm/DTK bin dirs)
#   MI_NVCC             nvcc (PATH or /usr/local/cuda/bin)
#   MI_HIP_ARCH_<NAME>  offload arch for a HIP plugin (default: platform.json)
#   MI_NVIDIA_ARCHS     SM list for the nvidia plugin (default: platform.json)

option(MI_GPU_PLUGINS "Build the GPU platform plugins (k100, z200, nvidia)" ON)
set(MI_GPU_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})

find_program(MI_HIPCC hipcc PATHS $ENV{ROCM_PATH}/bin $ENV{DTK_HOME}/bin /opt/dtk/bin /opt/rocm/bin)
find_program(MI_NVCC nvcc PATHS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)

# Does this hipcc produce code for ARCH? (Debian's knows gfx906/908/90a/940/
# 1030 but not Hygon's gfx926/gfx928, which need DTK's compiler.)
function(mi_hipcc_supports arch out)
  set(var MI_HIPCC_SUPPORTS_${arch})
  if(NOT DEFINED ${var})
    set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/mi_hipcc_probe)
    file(MAKE_DIRECTORY ${dir})
    file(WRITE ${dir}/probe.hip "extern \"C\" __global__ void mi_probe(float *p) { p[0] = 1.0f; }\n")
    execute_process(COMMAND ${MI_HIPCC} --genco --offload-arch=${arch} -x hip ${dir}/probe.hip
                            -o ${dir}/probe_${arch}.co
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0 AND EXISTS ${dir}/probe_${arch}.co)
      set(ok ON)
    else()
      set(ok OFF)
    endif()
    set(${var} ${ok} CACHE INTERNAL "hipcc can target ${arch}")
  endif()
  set(${out} ${${var}} PARENT_SCOPE)
endfunction()

# Tensor parallelism (gpu_comm.c): ranks and the RCCL/NCCL bootstrap over
# MPI when the top-level CMake found it (MI_WITH_MPI). libmpi is an ordinary
# DT_NEEDED (Debian's OpenMPI); RCCL/NCCL are dlopened, never linked.
function(mi_gpu_link_mpi target)
  if(TARGET MPI::MPI_C)
    target_compile_definitions(${target} PRIVATE MI_GPU_MPI=1)
    target_sources(${target} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../common/mpi_start.c)
    target_link_libraries(${target} PRIVATE MPI::MPI_C)
  endif()
endfunction()

function(mi_gpu_plugin name)
  set(json_file ${CMAKE_CURRENT_SOURCE_DIR}/platform.json)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${json_file})
  file(READ ${json_file} J)
  string(JSON api GET "${J}" api)
  string(JSON warp GET "${J}" wavefront)
  string(JSON score GET "${J}" score)
  string(JSON descr GET "${J}" description)
  string(JSON bm GET "${J}" matmul tile_m)
  string(JSON bn GET "${J}" matmul tile_n)
  string(JSON bk GET "${J}" matmul tile_k)
  string(JSON tm GET "${J}" matmul thread_m)
  string(JSON tn GET "${J}" matmul thread_n)
  string(JSON gmax GET "${J}" matmul gemv_max_m)
  string(JSON gthr GET "${J}" matmul gemv_threads)
  string(JSON arows GET "${J}" attention rows_per_block)
  string(JSON asmem GET "${J}" attention smem_bytes)
  set(tun MI_WARP=${warp} MI_MM_BM=${bm} MI_MM_BN=${bn} MI_MM_BK=${bk} MI_MM_TM=${tm}
          MI_MM_TN=${tn} MI_GEMV_MAX_M=${gmax} MI_GEMV_THREADS=${gthr})
  set(devflags "")
  foreach(d ${tun})
    list(APPEND devflags -D${d})
  endforeach()
  string(TOUPPER ${name} NAME)
  set(src ${MI_GPU_COMMON_DIR}/mi_kernels.cu)
  set(deps ${src} ${MI_GPU_COMMON_DIR}/mi_gpu_compat.h ${MI_GPU_COMMON_DIR}/gpu_kernels.h ${json_file})
  set(have 0)
  set(no_code "")
  set(code ${CMAKE_CURRENT_BINARY_DIR}/mi_kernels_${name})

  if(api STREQUAL "hip")
    string(JSON def_arch GET "${J}" offload_arch)
    set(MI_HIP_ARCH_${NAME} ${def_arch} CACHE STRING "offload arch for the ${name} plugin's device code")
    set(arch ${MI_HIP_ARCH_${NAME}})
    set(api_def MI_GPU_API_HIP)
    if(NOT MI_HIPCC)
      set(no_code "built without device code for ${arch}: hipcc was not found at configure time (apt-get install hipcc libamdhip64-dev, or Hygon DTK)")
    else()
      mi_hipcc_supports(${arch} ok)
      if(NOT ok)
        set(no_code "built without device code for ${arch}: the hipcc used at build time (${MI_HIPCC}) cannot target ${arch}; it needs Hygon DTK's compiler (or configure -DMI_HIP_ARCH_${NAME}=<arch> for a stand-in)")
      else()
        set(have 1)
        set(code ${code}_${arch}.co)
        add_custom_command(OUTPUT ${code}
          COMMAND ${MI_HIPCC} --genco --offload-arch=${arch} -O3 -x hip ${devflags}
                  -I${MI_GPU_COMMON_DIR} -o ${code} ${src}
          DEPENDS ${deps}
          COMMENT "HIP code object for ${name} (${arch})" VERBATIM)
      endif()
    endif()
    if(NOT have)
      message(STATUS "GPU plugin ${name}: ${no_code}")
    else()
      message(STATUS "GPU plugin ${name}: HIP device code for ${arch} (${MI_HIPCC})")
    endif()
  elseif(api STREQUAL "cuda")
    string(JSON nsm LENGTH "${J}" cuda_archs)
    set(def_sms "")
    math(EXPR last "${nsm} - 1")
    foreach(i RANGE ${last})
      string(JSON sm GET "${J}" cuda_archs ${i})
      list(APPEND def_sms ${sm})
    endforeach()
    set(MI_NVIDIA_ARCHS "${def_sms}" CACHE STRING "SM versions for the nvidia plugin's fatbin")
    set(gencode "")
    set(arch "")
    list(LENGTH MI_NVIDIA_ARCHS n)
    set(i 0)
    foreach(sm ${MI_NVIDIA_ARCHS})
      math(EXPR i "${i} + 1")
      if(i EQUAL n) # the newest also as PTX, for JIT on later GPUs
        list(APPEND gencode -gencode arch=compute_${sm},code=[sm_${sm},compute_${sm}])
      else()
        list(APPEND gencode -gencode arch=compute_${sm},code=sm_${sm})
      endif()
      list(APPEND arch sm_${sm})
    endforeach()
    string(REPLACE ";" "," arch "${arch}")
    set(api_def MI_GPU_API_CUDA)
    if(NOT MI_NVCC)
      set(no_code "built without device code for ${arch}: nvcc was not found at configure time")
      message(STATUS "GPU plugin ${name}: ${no_code}")
    else()
      set(have 1)
      set(code ${code}.fatbin)
      # --no-compress: the kernel names stay readable in the fatbin (tests
      # check them); the driver loads either form.
      add_custom_command(OUTPUT ${code}
        COMMAND ${MI_NVCC} -fatbin --no-compress -O3 ${gencode} ${devflags}
                -I${MI_GPU_COMMON_DIR} -o ${code} ${src}
        DEPENDS ${deps}
        COMMENT "CUDA fatbin for ${name} (${arch})" VERBATIM)
      message(STATUS "GPU plugin ${name}: CUDA device code for ${arch} (${MI_NVCC})")
    endif()
  else()
    message(FATAL_ERROR "${json_file}: api must be \"hip\" or \"cuda\" (got \"${api}\")")
  endif()

  set(MI_GPU_BLOB_NAME ${name})
  set(MI_GPU_BLOB_HAVE ${have})
  set(MI_GPU_BLOB_FILE ${code})
  set(blob ${CMAKE_CURRENT_BINARY_DIR}/gpu_blob_${name}.c)
  configure_file(${MI_GPU_COMMON_DIR}/gpu_blob.c.in ${blob} @ONLY)
  set(srcs
    ${MI_GPU_COMMON_DIR}/gpu_plugin_main.c
    ${MI_GPU_COMMON_DIR}/gpu_platform.c
    ${MI_GPU_COMMON_DIR}/gpu_launch.c
    ${MI_GPU_COMMON_DIR}/gpu_libsearch.c
    ${MI_GPU_COMMON_DIR}/gpu_comm.c
    ${MI_GPU_COMMON_DIR}/gpu_rt_common.c
    ${blob})
  if(api STREQUAL "hip")
    list(APPEND srcs ${MI_GPU_COMMON_DIR}/gpu_rt_hip.c)
  else()
    list(APPEND srcs ${MI_GPU_COMMON_DIR}/gpu_rt_cuda.c)
  endif()
  if(have)
    list(APPEND srcs ${code}) # not compiled: makes the target run the device compile
    set_source_files_properties(${blob} PROPERTIES OBJECT_DEPENDS ${code})
  else()
    set(code "")
  endif()
  mi_add_plugin(mi_plugin_${name} ${name} ${srcs})
  target_include_directories(mi_plugin_${name} PRIVATE ${MI_GPU_COMMON_DIR})
  # Strings go through a generated header (they hold spaces and parentheses).
  set(cfg ${CMAKE_CURRENT_BINARY_DIR}/gpu_plugin_config.h)
  string(REPLACE "\"" "\\\"" descr "${descr}")
  file(WRITE ${cfg}.tmp "/* Generated by gpu_plugin.cmake from ${json_file} */\n"
    "#define MI_GPU_NAME \"${name}\"\n"
    "#define MI_GPU_ARCH \"${arch}\"\n"
    "#define MI_GPU_NO_CODE \"${no_code}\"\n"
    "#define MI_GPU_DESCRIPTION \"${descr}\"\n"
    "#define MI_GPU_SCORE ${score}\n"
    "#define MI_ATT_ROWS ${arows}\n"
    "#define MI_ATT_SMEM ${asmem}\n")
  configure_file(${cfg}.tmp ${cfg} COPYONLY) # rewritten only when it changes
  target_include_directories(mi_plugin_${name} PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
  target_compile_definitions(mi_plugin_${name} PRIVATE ${tun} ${api_def})
  target_link_libraries(mi_plugin_${name} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  mi_gpu_link_mpi(mi_plugin_${name})
  # For tests: name, whether it has device code, the code object file.
  set_property(GLOBAL APPEND PROPERTY MI_GPU_PLUGIN_INFO "${name}|${api}|${have}|${code}|${arch}")
endfunction()
