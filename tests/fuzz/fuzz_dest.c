/* fuzz_dest.c -- libFuzzer harness: the destination parser (shimctl's DEST
 * arguments). A destination that parses must format back to a key that
 * parses to the same destination. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char s[600], key[NS_KEY_MAX];
	struct ns_dest d, d2;

	if (len >= sizeof(s))
		return 0;
	memcpy(s, data, len);
	s[len] = '\0';
	if (ns_dest_parse(s, &d) != 0)
		return 0;
	if (ns_dest_key(&d, key, sizeof(key)) < 0)
		return 0;
	if (ns_dest_parse(key, &d2) != 0 || d2.port != d.port || d2.family != d.family ||
	    strcmp(d2.name, d.name) != 0 || memcmp(d2.addr, d.addr, sizeof(d.addr)) != 0)
		__builtin_trap();   /* the key does not round-trip */
	return 0;
}
