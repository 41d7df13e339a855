/* SHA-256 of buffers and files (content addresses, manifest hashes), through
 * OpenSSL's libcrypto: a well-kept implementation, not one of our own. */
#include <openssl/evp.h>
#include <stdio.h>

#include "core/gen/gen.h"

static void to_hex(const unsigned char *d, unsigned n, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = 0; i < n && i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[64] = 0;
}

void mi_sha256_buf(const void *data, size_t n, char out[65]) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  if (!EVP_Digest(data, n, d, &dl, EVP_sha256(), NULL) || dl != 32) {
    out[0] = 0;
    return;
  }
  to_hex(d, dl, out);
}

int mi_sha256_file(const char *path, char out[65]) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  unsigned char buf[1 << 16];
  size_t r;
  while (ok && (r = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, r);
  ok = ok && !ferror(f);
  fclose(f);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned dl = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, d, &dl) && dl == 32;
  EVP_MD_CTX_free(ctx);
  if (!ok) return -1;
  to_hex(d, dl, out);
  return 0;
}
