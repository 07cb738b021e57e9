/* hmac.h -- HMAC-SHA-256 (hmac.c). */
#ifndef NS_HMAC_H
#define NS_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
	uint32_t h[8];
	uint64_t len;
	unsigned char buf[64];
	size_t n;
};

void ag_sha256_init(struct sha256 *s);
void ag_sha256_update(struct sha256 *s, const void *data, size_t len);
void ag_sha256_final(struct sha256 *s, unsigned char out[SHA256_LEN]);
void ag_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen, unsigned char out[SHA256_LEN]);

#endif
