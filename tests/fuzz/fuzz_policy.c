/* fuzz_policy.c -- libFuzzer harness: the policy parser and resolver.
 * Any input must parse or fail with file:line errors, never crash, leak
 * or read out of bounds; a policy that parses must resolve any destination. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static const char *const dests[] = { "api.example.com:443", "a.bank.example:80", "203.0.113.7:8080",
		"[2001:db8::1]:443", "127.0.0.1:1", "x:65535" };
	struct ns_policy p;
	char err[4096];

	memset(&p, 0, sizeof(p));
	if (ns_policy_parse((const char *)data, len, "fuzz.conf", &p, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < sizeof(dests) / sizeof(dests[0]); i++) {
			struct ns_dest d;
			struct ns_settings s;

			if (ns_dest_parse(dests[i], &d) == 0)
				ns_policy_resolve(&p, &d, &s, NULL);
		}
		ns_policy_free(&p);
	} else if (strncmp(err, "fuzz.conf:", 10) != 0) {
		__builtin_trap();   /* every error names the file */
	}
	return 0;
}
