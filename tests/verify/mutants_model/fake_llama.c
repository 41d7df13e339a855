/* A stand-in for llama.cpp's libllama.so: the foreign-library mutant links
 * it, so its DT_NEEDED names "libllama.so". Does nothing. */
__attribute__((visibility("default"))) int llama_backend_init(void) {
  return 0;
}
