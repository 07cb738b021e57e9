/* test_hmac.c -- HMAC-SHA-256 of the fleet's signatures (tools/agent/hmac.c)
 * against RFC 4231's test vectors 1, 2 and 6 (a key longer than a block)
 * and SHA-256 of "" and of 1,000 bytes fed in uneven pieces (blocks
 * crossing update calls). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../tools/agent/hmac.h"

static void hex(const unsigned char *b, char out[2 * SHA256_LEN + 1])
{
	for (int i = 0; i < SHA256_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void check_hmac(const void *key, size_t klen, const char *msg, const char *want)
{
	unsigned char mac[SHA256_LEN];
	char got[2 * SHA256_LEN + 1];

	ag_hmac_sha256(key, klen, msg, strlen(msg), mac);
	hex(mac, got);
	cr_assert_str_eq(got, want);
}

Test(hmac, rfc4231_vectors)
{
	unsigned char k1[20], k6[131];

	memset(k1, 0x0b, sizeof(k1));
	memset(k6, 0xaa, sizeof(k6));
	check_hmac(k1, sizeof(k1), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	check_hmac("Jefe", 4, "what do ya want for nothing?",
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	check_hmac(k6, sizeof(k6), "Test Using Larger Than Block-Size Key - Hash Key First",
		   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

Test(hmac, sha256_in_pieces)
{
	unsigned char d[SHA256_LEN], a[1000];
	char got[2 * SHA256_LEN + 1];
	struct sha256 s;
	size_t off = 0, step = 1;

	ag_sha256_init(&s);
	ag_sha256_final(&s, d);
	hex(d, got);
	cr_assert_str_eq(got, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	memset(a, 'a', sizeof(a));
	ag_sha256_init(&s);
	while (off < sizeof(a)) {
		size_t n = step < sizeof(a) - off ? step : sizeof(a) - off;

		ag_sha256_update(&s, a + off, n);
		off += n;
		step = step * 3 + 1;
	}
	ag_sha256_final(&s, d);
	hex(d, got);
	cr_assert_str_eq(got, "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}
